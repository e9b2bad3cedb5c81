"""The closed loop on the stateful fraud job: real broker, job process and two controller
processes, the leader killed -9 in the middle of its scale-up.

The fraud job's scoring call runs in its stateful operator, so the job names
`state_partitions` as its knob. A step in the card-transaction rate makes it fall behind; the
controller must size and send a `state_partitions` tuple (never `input_parallelism`, which
would not help), the job must repartition its state offline, restart and ack it, the backlog
must drain, and every acknowledged transaction must be scored exactly once with each
account's count running on across the change (1, 2, 3, … by `account_seq`). Two controller
instances run; the leader is killed as soon as its tuple is on the control topic. The other
must take over within its lease session (6 s, the default) plus a little, resume the tuple in
flight instead of sending another, and see the change through.

The test measures the job's capacity at 2 state partitions first (a burst of transactions
for accounts of their own, worked through in full batches before the controller starts),
then runs 30 % of it and steps to 2.5 times it: enough to need about six partitions, within
the job's own ceiling of 8 (`--max-state-partitions`, which the controller reads from the
metrics). 10 ms of scoring per transaction, batches of at most 600 (the running batch the
change waits for stays short), a 1 s trigger.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import CardTransaction
from streamctl.cards import CardLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from tests.accounting import assert_every_transaction_scored_once
from tests.e2e.loop import (
    CALIBRATION_BATCHES,
    NOT_SHEDDABLE,
    capacity,
    run_loop,
    start_controller,
    until_batches_at_new_size,
)
from tests.support.bed import Watch
from tests.support.kafka import produce_records

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

QUERY = "e2e-fraud"
MAX_STATE_PARTITIONS = 8
BATCH_CAP = 600
STEADY_S = 15.0
LOAD_MAX_S = 180.0
"""A cap on the load, far past the step: it stops once the job ran a few batches
at its new state partitions (the new size under the load, not only the backlog's drain)."""


@pytest.fixture
def job(bootstrap_servers: str, loop_topics: dict[str, str],
        tmp_path: Path) -> Iterator[list[Child]]:
    """The job alone; the test starts the controller (into this list) once it measured it."""
    with run_loop(bootstrap_servers, loop_topics, [
        *NOT_SHEDDABLE, "--job", "fraud-detection", "--query-id", QUERY,
        "--checkpoint-dir", str(tmp_path / "checkpoint"), "--state-partitions", "2",
        "--max-state-partitions", str(MAX_STATE_PARTITIONS),
        "--max-offsets-per-trigger", str(BATCH_CAP), "--set", "enrichment_cost_ms=10",
        "--trigger-interval-s", "1", "--set", "watermark_s=600",
    ], tmp_path) as children:
        yield children


def test_a_load_step_is_met_with_state_partitions_through_a_controller_takeover_and_nothing_is_lost(
    bootstrap_servers: str, loop_topics: dict[str, str], job: list[Child], tmp_path: Path,
) -> None:
    t = loop_topics
    watch = Watch(bootstrap_servers, t, QUERY, job)
    ledger = CardLedger()
    measured = _measure_capacity(bootstrap_servers, t["input"], watch, ledger)
    first = watch.view.samples[-1]
    assert (first.scaling_parameter, first.state_partitions, first.max_state_partitions) == (
        "state_partitions", 2, MAX_STATE_PARTITIONS)
    job.append(start_controller(bootstrap_servers, t, tmp_path, name="controller-1"))
    watch.until(lambda: bool(watch.takeovers()), 60, "controller-1 to lead")
    job.append(start_controller(bootstrap_servers, t, tmp_path, name="controller-2"))

    # Far beyond 2 partitions, so the backlog grows fast enough to corroborate the overload
    # at once (a step to 1.1 times the capacity grows it too slowly to cross the noise floor
    # before the load ends).
    profile = RateProfile("step", 0.3 * measured, 2.5 * measured, start_s=STEADY_S)
    stop_load = threading.Event()
    load = threading.Thread(target=run_load, args=(
        LoadSpec(bootstrap_servers, t["input"], profile, duration_s=LOAD_MAX_S,
                 event_type="card", accounts=100), ledger, stop_load))
    step_at = time.monotonic() + STEADY_S
    load.start()
    try:
        watch.until(lambda: bool(watch.sent()), STEADY_S + 90, "the leader's scale-up")
        leader = next(c for c in job if c.name == "controller-1")
        job.remove(leader)  # the watch fails on a dead child; this one dies on purpose
        leader.kill()
        killed_ms = time.time() * 1000
        watch.until(lambda: len(watch.takeovers()) == 2, 60, "controller-2 to take over")
        watch.until(lambda: bool(watch.applied()), STEADY_S + 90, "an applied control tuple")
        first_applied_after_step_s = time.monotonic() - step_at
        until_batches_at_new_size(watch, lambda m: m.state_partitions > 2)
    finally:
        stop_load.set()
        load.join(60)
    assert ledger.failed == 0

    takeover = watch.takeovers()[-1]
    takeover_s = (takeover.decided_at_ms - killed_ms) / 1000
    assert takeover.target_value == "controller-2", takeover
    sent, applied = watch.sent(), watch.applied()
    assert sent[0].control_id in takeover.reason, takeover.reason  # resumed, not decided anew
    assert sent and {d.parameter for d in sent} == {"state_partitions"}, sent
    control_id = applied[0].control_id
    assert sent[0].control_id == control_id
    assert 2 < int(sent[0].target_value) <= MAX_STATE_PARTITIONS
    assert "units of state_partitions" in sent[0].reason
    assert applied[0].detail.startswith("state_partitions 2→"), applied[0].detail
    if "unanswered" in takeover.reason:  # answered after the takeover: the new leader's
        watch.until(lambda: any((d.action, d.control_id) == ("ack_applied", control_id)
                                for d in watch.decisions), 30, "the controller to log the ack")

    # The backlog drains at the new state partitions.
    watch.until(lambda: watch.view.samples[-1].state_partitions > 2 and watch.lag_records() == 0,
                90, "the backlog to drain at the new state partitions")

    assert_every_transaction_scored_once(bootstrap_servers, t["output"], ledger,
                                         timeout_s=30)
    assert len([d for d in watch.sent() if d.control_id == control_id]) == 1  # sent once
    print(f"\ncapacity {measured:.0f}/s at 2 partitions; step {profile.base_per_s:.0f} -> "
          f"{profile.peak_per_s:.0f}/s; first applied tuple {first_applied_after_step_s:.1f} s "
          "after the step; "
          f"pause {applied[0].pause_ms} ms; {applied[0].detail}; "
          f"decisions: {[(d.parameter, d.current_value, d.target_value) for d in sent]}; "
          f"first reason: {sent[0].reason}; leader killed -9 mid-scale-up, controller-2 "
          f"took over {takeover_s:.1f} s later: {takeover.reason}")
    watch.close()


def _measure_capacity(bootstrap: str, topic: str, watch: Watch, ledger: CardLedger) -> float:
    """Three batches' worth of transactions for calibration accounts (apart from the load's),
    worked through at 2 state partitions: records/s per full batch after the first. Each is
    in the ledger."""
    now_ms = int(time.time() * 1000)
    burst = [CardTransaction(f"calib-{n}", f"calib-{n % 50:02d}", "card-calib", n // 50,
                             20.0, "m", "DE", now_ms, "online")
             for n in range(CALIBRATION_BATCHES * BATCH_CAP)]
    produce_records(bootstrap, topic, ((t.account_id, t) for t in burst))
    for txn in burst:
        ledger.record(txn)
    watch.until(lambda: watch.lag_records() == 0 and bool(watch.view.samples), 240,
                "the calibration burst worked through")
    return capacity(watch.view.samples, BATCH_CAP)
