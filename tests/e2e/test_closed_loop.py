"""The closed loop, end to end, on real processes: broker, job, controller, load.

A step in the input rate makes the job fall behind; the controller must notice, send one
control tuple raising the input parallelism, the job must apply it and ack, the backlog must
drain, and every produced record must be accounted for exactly once in the job's output
(count and sum of sequence numbers per sensor and window, one output row per window).
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stack.ports import find_free_ports
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from tests.accounting import assert_every_record_accounted_for, flush_last_windows
from tests.e2e.loop import LoopWatch, run_loop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

WINDOW_MS = 10_000
QUERY = "e2e-sensors"


@pytest.fixture
def controller_port() -> int:
    return find_free_ports(1)[0]


@pytest.fixture
def closed_loop(bootstrap_servers: str, loop_topics: dict[str, str], tmp_path: Path,
                controller_port: int) -> Iterator[list[Child]]:
    with run_loop(bootstrap_servers, loop_topics, [
        "--query-id", QUERY, "--checkpoint-dir", str(tmp_path / "checkpoint"),
        "--job", "sensor-averages", "--input-parallelism", "2",
        "--set", "enrichment_cost_ms=5", "--trigger-interval-s", "1",
        "--set", f"window_s={WINDOW_MS // 1000}", "--set", "watermark_s=10",
    ], tmp_path, controller_port) as children:
        yield children


def test_backlog_triggers_one_scale_up_that_drains_it_without_losing_a_record(
    bootstrap_servers: str, loop_topics: dict[str, str], closed_loop: list[Child],
    controller_port: int,
) -> None:
    t = loop_topics
    watch = LoopWatch(bootstrap_servers, t, QUERY, closed_loop)
    watch.until(lambda: bool(watch.view.samples), 150, "the job's first metrics")

    # 120/s is well within two units of ~200/s each; 900/s needs about seven.
    profile = RateProfile("step", 120, 900, start_s=10)
    ledger = Ledger(WINDOW_MS)
    load = threading.Thread(target=run_load, args=(
        LoadSpec(bootstrap_servers, t["input"], profile, duration_s=60), ledger))
    step_at = time.monotonic() + 10
    load.start()

    watch.until(lambda: bool(watch.applied()), 120, "an applied control tuple")
    first_control_after_step_s = time.monotonic() - step_at
    load.join(90)
    assert ledger.failed == 0 and ledger.acked > 20_000

    applied, scale_ups = watch.applied(), watch.sent()
    assert scale_ups and int(scale_ups[0].target_value) > 2, watch.decisions
    assert scale_ups[0].control_id == applied[0].control_id
    assert applied[0].pause_ms > 0
    # Prometheus carries the pause and the decision's reason (Grafana's pauses panel and
    # decision annotations): the histogram holds exactly the applied acks' pauses, and the
    # query's last decision is one series whose reason is a sentence.
    def exported() -> bool:
        count, total_s, decisions = _pauses(controller_port, QUERY)
        pauses_s = [a.pause_ms / 1000 for a in watch.applied()]
        return (count == len(pauses_s) and total_s == pytest.approx(sum(pauses_s))
                and len(decisions) == 1 and bool(decisions[0].get("reason")))

    watch.until(exported, 30, "the controller to export every applied pause and its last "
                "decision with a reason")

    # The backlog drains: the job catches up with everything that was produced.
    watch.until(lambda: bool(watch.view.samples) and watch.view.samples[-1].input_parallelism > 2
                and watch.lag_records() == 0, 120, "the backlog to drain at the new parallelism")

    flush_last_windows(bootstrap_servers, t["input"])
    assert_every_record_accounted_for(bootstrap_servers, t["output"], ledger)
    print(f"\nload step -> applied control tuple: {first_control_after_step_s:.1f} s; "
          f"pause {applied[0].pause_ms} ms; decision: {scale_ups[0].reason}")
    watch.close()


def _pauses(port: int, query: str) -> tuple[float, float, list[dict[str, str]]]:
    """(count, sum) of the controller's pause histogram for `query`, and the labels of its
    last-decision series, scraped from the controller's endpoint now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples
               if s.labels.get("query") == query]
    value = {s.name: s.value for s in samples}
    return (value.get("streamctl_reconfiguration_pause_seconds_count", 0.0),
            value.get("streamctl_reconfiguration_pause_seconds_sum", 0.0),
            [s.labels for s in samples if s.name == "streamctl_last_decision_timestamp_seconds"])
