"""The closed loop on the stateful fraud job: real broker, job process and controller process.

The fraud job's scoring call runs in its stateful operator, so the job names
`state_partitions` as its knob. A step in the card-transaction rate makes it fall behind; the
controller must size and send a `state_partitions` tuple (never `input_parallelism`, which
would not help), the job must repartition its state offline, restart and ack it, the backlog
must drain, and every acknowledged transaction must be scored exactly once with each
account's count running on across the change (1, 2, 3, … by `account_seq`).

Tuned to fit a 4-minute budget on 2 shared cores (passed in 124 s on an idle machine):
10 ms of scoring per transaction (about 90/s per state partition on a quiet machine, 50/s at a
load average of 7, so the step to 250/s overloads 2 partitions either way), batches of at most 600
transactions (the running batch that the change waits for stays short), a 1 s trigger, and
the job's own ceiling of 8 state partitions (`--max-state-partitions`, which the controller
reads from the metrics).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamctl.cards import CardLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from tests.accounting import assert_every_transaction_scored_once
from tests.e2e.loop import LoopWatch, run_loop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

QUERY = "e2e-fraud"
MAX_STATE_PARTITIONS = 8


@pytest.fixture
def closed_loop(bootstrap_servers: str, loop_topics: dict[str, str],
                tmp_path: Path) -> Iterator[list[Child]]:
    with run_loop(bootstrap_servers, loop_topics, [
        "--job", "fraud-detection", "--query-id", QUERY,
        "--checkpoint-dir", str(tmp_path / "checkpoint"), "--state-partitions", "2",
        "--max-state-partitions", str(MAX_STATE_PARTITIONS),
        "--max-offsets-per-trigger", "600", "--set", "enrichment_cost_ms=10",
        "--trigger-interval-s", "1", "--set", "watermark_s=600",
    ], tmp_path) as children:
        yield children


def test_a_load_step_is_met_with_state_partitions_and_nothing_is_lost(
    bootstrap_servers: str, loop_topics: dict[str, str], closed_loop: list[Child],
) -> None:
    t = loop_topics
    watch = LoopWatch(bootstrap_servers, t, QUERY, closed_loop)
    watch.until(lambda: bool(watch.view.samples), 90, "the fraud job's first metrics")
    first = watch.view.samples[-1]
    assert (first.scaling_parameter, first.state_partitions, first.max_state_partitions) == (
        "state_partitions", 2, MAX_STATE_PARTITIONS)

    # 25/s is well within 2 state partitions; 250/s is far beyond them, so the backlog grows
    # fast enough to corroborate the overload at once. (150/s was too close on a quiet machine:
    # 2 partitions managed 136/s, the backlog grew 10-40/s and never crossed the noise floor
    # before the load ended.)
    profile = RateProfile("step", 25, 250, start_s=15)
    ledger = CardLedger()
    load = threading.Thread(target=run_load, args=(
        LoadSpec(bootstrap_servers, t["input"], profile, duration_s=60, event_type="card",
                 accounts=100), ledger))
    step_at = time.monotonic() + 15
    load.start()

    watch.until(lambda: bool(watch.applied()), 90, "an applied control tuple")
    first_applied_after_step_s = time.monotonic() - step_at
    load.join(90)
    assert ledger.failed == 0 and ledger.acked > 5_000

    sent, applied = watch.sent(), watch.applied()
    assert sent and {d.parameter for d in sent} == {"state_partitions"}, sent
    control_id = applied[0].control_id
    assert sent[0].control_id == control_id
    assert 2 < int(sent[0].target_value) <= MAX_STATE_PARTITIONS
    assert "units of state_partitions" in sent[0].reason
    assert applied[0].detail.startswith("state_partitions 2→"), applied[0].detail
    watch.until(lambda: any((d.action, d.control_id) == ("ack_applied", control_id)
                            for d in watch.decisions), 30, "the controller to log the ack")

    # The backlog drains at the new state partitions.
    watch.until(lambda: watch.view.samples[-1].state_partitions > 2 and watch.lag_records() == 0,
                90, "the backlog to drain at the new state partitions")

    assert_every_transaction_scored_once(bootstrap_servers, t["output"], ledger,
                                         timeout_s=30)
    print(f"\nload step -> first applied tuple: {first_applied_after_step_s:.1f} s; "
          f"pause {applied[0].pause_ms} ms; {applied[0].detail}; "
          f"decisions: {[(d.parameter, d.current_value, d.target_value) for d in sent]}; "
          f"first reason: {sent[0].reason}")
    watch.close()
