"""The closed loop, end to end, on real processes: broker, job, controller, load.

The test measures the job's capacity first (a burst it works through in full batches, before
the controller starts), runs a load at 40 % of it, then steps the load to three times it.
The job falls behind; the controller must notice and send one control tuple raising the
input parallelism, the job must apply it and ack, the backlog must drain with no second
tuple, and every produced record must be accounted for exactly once in the job's output
(count and sum of sequence numbers per sensor and window, one output row per window).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stack.ports import find_free_ports
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from tests.accounting import assert_every_record_accounted_for, flush_last_windows
from tests.e2e.loop import (
    SENSOR_WINDOW_MS,
    LoopWatch,
    run_loop,
    sensor_capacity,
    sensor_job,
    start_controller,
)
from tests.support.prometheus import scrape

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

QUERY = "e2e-sensors"
STEADY_S, AFTER_STEP_S = 10.0, 40.0


@pytest.fixture
def job(bootstrap_servers: str, loop_topics: dict[str, str],
        tmp_path: Path) -> Iterator[list[Child]]:
    """The job alone; the test starts the controller (into this list) once it measured it."""
    with run_loop(bootstrap_servers, loop_topics,
                  sensor_job(QUERY, tmp_path / "checkpoint"), tmp_path) as children:
        yield children


def test_backlog_triggers_one_scale_up_that_drains_it_without_losing_a_record(
    bootstrap_servers: str, loop_topics: dict[str, str], job: list[Child], tmp_path: Path,
) -> None:
    t = loop_topics
    watch = LoopWatch(bootstrap_servers, t, QUERY, job)
    ledger = Ledger(SENSOR_WINDOW_MS)
    measured = sensor_capacity(bootstrap_servers, t["input"], watch, ledger)
    (controller_port,) = find_free_ports(1)
    job.append(start_controller(bootstrap_servers, t, tmp_path, controller_port))

    profile = RateProfile("step", 0.4 * measured, 3 * measured, start_s=STEADY_S)
    load = threading.Thread(target=run_load, args=(
        LoadSpec(bootstrap_servers, t["input"], profile, duration_s=STEADY_S + AFTER_STEP_S),
        ledger))
    step_at = time.monotonic() + STEADY_S
    load.start()
    try:
        watch.until(lambda: bool(watch.applied()), STEADY_S + 120, "an applied control tuple")
        first_control_after_step_s = time.monotonic() - step_at
    finally:
        load.join(STEADY_S + AFTER_STEP_S + 30)
    assert ledger.failed == 0

    [scale_up], applied = watch.sent(), watch.applied()
    assert int(scale_up.target_value) > 2, watch.decisions
    assert scale_up.control_id == applied[0].control_id and applied[0].pause_ms > 0
    _assert_prometheus_has_the_pauses_and_the_reason(watch, controller_port)

    # The backlog drains at the new parallelism, with that one tuple.
    watch.until(lambda: watch.view.samples[-1].input_parallelism > 2
                and watch.lag_records() == 0, 120, "the backlog to drain at the new parallelism")
    assert len(watch.sent()) == 1, [(d.action, d.target_value) for d in watch.sent()]

    flush_last_windows(bootstrap_servers, t["input"])
    assert_every_record_accounted_for(bootstrap_servers, t["output"], ledger)
    print(f"\ncapacity {measured:.0f}/s at 2 units; step {profile.base_per_s:.0f} -> "
          f"{profile.peak_per_s:.0f}/s; applied control tuple {first_control_after_step_s:.1f} s"
          f" after the step: 2 -> {scale_up.target_value}, pause {applied[0].pause_ms} ms; "
          f"decision: {scale_up.reason}")
    watch.close()


def _assert_prometheus_has_the_pauses_and_the_reason(watch: LoopWatch, port: int) -> None:
    """Grafana's pauses panel and decision annotations: the controller's histogram holds
    exactly the applied acks' pauses, and the query's last decision is one series whose
    reason is a sentence."""
    def exported() -> bool:
        count, total_s, decisions = _pauses(port, QUERY)
        pauses_s = [a.pause_ms / 1000 for a in watch.applied()]
        return (count == len(pauses_s) and total_s == pytest.approx(sum(pauses_s))
                and len(decisions) == 1 and bool(decisions[0].get("reason")))

    watch.until(exported, 30, "the controller to export every applied pause and its last "
                "decision with a reason")


def _pauses(port: int, query: str) -> tuple[float, float, list[dict[str, str]]]:
    """(count, sum) of the controller's pause histogram for `query`, and the labels of its
    last-decision series, scraped from the controller's endpoint now."""
    text = scrape(f"http://127.0.0.1:{port}/metrics") or ""
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples
               if s.labels.get("query") == query]
    value = {s.name: s.value for s in samples}
    return (value.get("streamctl_reconfiguration_pause_seconds_count", 0.0),
            value.get("streamctl_reconfiguration_pause_seconds_sum", 0.0),
            [s.labels for s in samples if s.name == "streamctl_last_decision_timestamp_seconds"])
