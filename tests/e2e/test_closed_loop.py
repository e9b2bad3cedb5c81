"""The closed loop, end to end, on real processes: broker, job, controller, load.

A step in the input rate makes the job fall behind; the controller must notice, send one
control tuple raising the input parallelism, the job must apply it and ack, the backlog must
drain, and every produced record must be accounted for exactly once in the job's output
(count and sum of sequence numbers per sensor and window, one output row per window).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from tests.accounting import assert_every_record_accounted_for, flush_last_windows
from tests.e2e.loop import LoopWatch, run_loop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

WINDOW_MS = 10_000
QUERY = "e2e-sensors"


@pytest.fixture
def closed_loop(bootstrap_servers: str, loop_topics: dict[str, str],
                tmp_path: Path) -> Iterator[list[Child]]:
    with run_loop(bootstrap_servers, loop_topics, [
        "--query-id", QUERY, "--checkpoint-dir", str(tmp_path / "checkpoint"),
        "--input-parallelism", "2", "--enrichment-cost-ms", "5", "--trigger-interval-s", "1",
        "--window-s", str(WINDOW_MS // 1000), "--watermark-s", "10",
    ], tmp_path) as children:
        yield children


def test_backlog_triggers_one_scale_up_that_drains_it_without_losing_a_record(
    bootstrap_servers: str, loop_topics: dict[str, str], closed_loop: list[Child],
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

    # The backlog drains: the job catches up with everything that was produced.
    watch.until(lambda: bool(watch.view.samples) and watch.view.samples[-1].input_parallelism > 2
                and watch.lag_records() == 0, 120, "the backlog to drain at the new parallelism")

    flush_last_windows(bootstrap_servers, t["input"])
    assert_every_record_accounted_for(bootstrap_servers, t["output"], ledger)
    print(f"\nload step -> applied control tuple: {first_control_after_step_s:.1f} s; "
          f"pause {applied[0].pause_ms} ms; decision: {scale_ups[0].reason}")
    watch.close()
