"""`streamctl controller replay` reproduces the expected decisions on every recorded trace.

Each `tests/data/traces/<name>.expected.json` says what a good autoscaler should do on
`<name>.jsonl` (recorded from the real job, see that folder's README), as checks on the
replay's events: which action, how many times, roughly when, to which target. A check counts
only events from before the query's first actuation unless it says `include_counterfactual`
(after it, the recorded job no longer reflects the decision). The checks are written from
first principles, not from the policy's output: where today's policy disagrees, the check is
listed in `KNOWN_GAPS` with the reason, and runs as a strict xfail, so it turns into a failure
to remove from the list as soon as the policy gets it right.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from streamctl.cli import main
from tests.unit.controller.traces import derived_afresh

TRACES = Path(__file__).resolve().parents[3] / "data" / "traces"

KNOWN_GAPS: dict[tuple[str, str], str] = {}
"""(trace, check id) → why the committed policy misses it. Empty since the change-point-aware
arrival estimate, the trigger-aware backlog, skew-aware μ and readiness for long batches."""


def _expected() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name.removesuffix(".expected.json"), json.loads(p.read_text()))
            for p in sorted(TRACES.glob("*.expected.json"))]


@cache
def replayed(trace: str, args: tuple[str, ...] = ()) -> dict[str, Any]:
    """The `--json` output of `streamctl controller replay` on a committed trace."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["controller", "replay", "--trace", str(TRACES / trace), "--json", *args])
    assert code == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def matching(events: list[dict[str, Any]], check: dict[str, Any]) -> list[dict[str, Any]]:
    low, high = check.get("at_s", [float("-inf"), float("inf")])
    return [e for e in events
            if e["kind"] in ("decision", "verdict")
            and re.fullmatch(check["action"], e["action"])
            and re.search(check.get("reason", ""), e["reason"], re.IGNORECASE)
            and check.get("query", e["query_id"]) == e["query_id"]
            and low <= e["at_s"] <= high
            and (check.get("include_counterfactual", False) or not e["counterfactual"])]


def verify(events: list[dict[str, Any]], check: dict[str, Any]) -> None:
    found = matching(events, check)
    low, high = check["count"]
    shown = [(e["at_s"], e["action"], e["current"], e["target"]) for e in found]
    assert low <= len(found) <= high, (
        f"{check['id']}: {len(found)} matching events, expected {low}..{high}: {shown}\n"
        f"why: {check['why']}")
    if "target" in check:
        lo, hi = check["target"]
        assert all(lo <= int(e["target"]) <= hi for e in found), (
            f"{check['id']}: targets {[e['target'] for e in found]} outside [{lo}, {hi}]\n"
            f"why: {check['why']}")


CASES = [
    pytest.param(name, doc, check, id=f"{name}:{check['id']}",
                 marks=[pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[(name, check["id"])])]
                 if (name, check["id"]) in KNOWN_GAPS else [])
    for name, doc in _expected() for check in doc["expect"]
]


def test_every_scenario_has_a_trace_and_expectations() -> None:
    names = {name for name, _ in _expected()}
    assert names == {"step_up", "step_down", "ramp", "spike", "skewed_keys",
                     "lost_instance", "noisy_steady", "repeating_day", "noisy_downstream"}
    for name in names:
        trace = TRACES / f"{name}.jsonl"
        assert trace.is_file() and trace.stat().st_size < 800_000, trace


@pytest.mark.parametrize(("name", "doc", "check"), CASES)
def test_replay_meets_the_expected_decision(name: str, doc: dict[str, Any],
                                            check: dict[str, Any]) -> None:
    result = replayed(doc["trace"], tuple(doc["replay_args"]))
    assert result["summary"]["bad_records"] == 0
    verify(result["events"], check)


def test_step_down_waits_the_default_stabilisation_period() -> None:
    """The default 120 s is longer than the trace's 90 s of low load: no scale-down at all."""
    events = replayed("step_down.jsonl")["events"]
    verify(events, {"id": "default_stabilisation", "action": "scale_down", "count": [0, 0],
                    "include_counterfactual": True, "why": "120 s > 90 s of low load"})


@pytest.mark.parametrize("trace", sorted(p.name for p in TRACES.glob("*.jsonl")))
def test_the_memo_of_derived_figures_changes_no_decision(trace: str) -> None:
    """Every trace replayed with each query's `Memo` (and the arrival scan it carries from
    cycle to cycle) and with one that recomputes everything and scans each window afresh: the
    same events, figures included."""
    kept = replayed(trace)
    out = io.StringIO()
    with derived_afresh(), contextlib.redirect_stdout(out):
        assert main(["controller", "replay", "--trace", str(TRACES / trace), "--json"]) == 0
    assert json.loads(out.getvalue()) == kept
