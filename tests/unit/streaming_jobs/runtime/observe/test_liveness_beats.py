"""Liveness beats: an active instance says every second that it is up and which batch it runs,
so its loss is known within seconds however long its batches take, and a batch that never
ends is told apart from a long one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from controller.core.judgement import liveness
from controller.core.results import Lost
from controller.core.state import ControlState, InFlight
from controller.core.window import Admission, QueryWindow
from controller.settings import PolicySettings
from schemas import Role, SourcePartition, TaskMetrics
from streaming_jobs.runtime.checkpoint.running import RunningBatch, running_batch
from streaming_jobs.runtime.observe.metrics import RunContext
from streaming_jobs.runtime.observe.metrics import beat as beat_record
from streaming_jobs.runtime.publish import planned_partitions
from tests.unit.controller.core.test_failover import beat as heartbeat
from tests.unit.controller.core.test_failover import keep_standbys_alive
from tests.unit.controller.loop.test_cycle import Harness
from tests.unit.controller.traces import T0_MS, Job, end_ms, simulate

POLICY = PolicySettings()
NOW = T0_MS + 600_000
CTX = RunContext("q1", "a", 0, 2, 0, 16, 1000, ("sensors",), ("out",), beat_interval_ms=1000)
LONG_BATCHES_S = 12.0
"""The last batch's time: 5 × 12 s = 60 s of silence before a query without beats is lost."""


def beat(at_ms: int, *, instance: str = "a", running_batch_id: int = -1,
         running_since_ms: int = 0, epoch: int = 0) -> TaskMetrics:
    return replace(heartbeat(instance, at_ms, Role.ACTIVE, epoch), beat=True,
                   beat_interval_ms=1000, running_batch_id=running_batch_id,
                   running_since_ms=running_since_ms)


LAST_BATCH = replace(heartbeat("a", NOW - 70_000, Role.ACTIVE), batch_id=6, input_rows=100,
                     busy_ms=int(LONG_BATCHES_S * 1000))
"""The instance's newest batch: the one before the running one (batch 7)."""


def judge(last_beat: TaskMetrics, state: ControlState | None = None,
          last_batch: TaskMetrics | None = LAST_BATCH) -> Lost | None:
    return liveness(last_beat.batch_end_ms, 1.0, LONG_BATCHES_S, state or ControlState(), NOW,
                    POLICY, beat=last_beat, last_batch=last_batch)


# -- the verdict ----------------------------------------------------------------------------

def test_an_instance_that_beats_is_lost_after_two_and_a_half_silent_beat_intervals(
        ) -> None:
    """However long its batches run: the batch timeout here is 60 s."""
    assert judge(beat(NOW - 2_400, running_batch_id=7, running_since_ms=NOW - 20_000)) is None
    lost = judge(beat(NOW - 2_600, running_batch_id=7, running_since_ms=NOW - 20_000))
    assert isinstance(lost, Lost), lost
    assert lost.reason.startswith("no liveness beat for 2.6 s (timeout 2.5 s: 2.5 × its 1 s "
                                  "beat interval); the instance is gone or frozen"), lost.reason
    # The same silence from a query that sends no beats is within its batch timeout.
    assert liveness(NOW - 3_100, 1.0, LONG_BATCHES_S, ControlState(), NOW, POLICY) is None


def test_a_batch_running_past_the_batch_timeout_is_a_hung_query_though_it_beats() -> None:
    assert judge(beat(NOW - 500, running_batch_id=7, running_since_ms=NOW - 59_000)) is None
    hung = judge(beat(NOW - 500, running_batch_id=7, running_since_ms=NOW - 61_000))
    assert isinstance(hung, Lost), hung
    assert hung.reason.startswith("batch 7 has run for 61 s (timeout 60 s: 5 × its 12 s batch "
                                  "interval, at least 25 s) while the instance still beats")
    # Between batches a beating instance is alive, however long ago its last batch ended.
    assert judge(beat(NOW - 500)) is None


def test_a_runs_first_batch_is_never_judged_hung_however_long_it_takes() -> None:
    """A cold first batch (Spark's start-up) was never judged before it ended: no batch of
    the instance seen yet, or only another instance's."""
    first = beat(NOW - 500, running_batch_id=7, running_since_ms=NOW - 300_000)
    assert judge(first, last_batch=None) is None
    assert judge(first, last_batch=replace(LAST_BATCH, instance_id="b")) is None
    assert judge(first, last_batch=replace(LAST_BATCH, batch_id=7)) is None  # replayed


def test_beats_are_judged_by_when_the_controller_read_them_not_by_the_jobs_clock() -> None:
    """A job on another machine whose clock is 10 s behind: its beats look 10 s old when
    they arrive, yet the instance is alive."""
    behind = beat(NOW - 10_500)
    assert liveness(behind.batch_end_ms, 1.0, LONG_BATCHES_S, ControlState(), NOW, POLICY,
                    beat=behind, beat_heard_ms=NOW - 500, last_batch=LAST_BATCH) is None
    window = QueryWindow("q1", window_s=60, max_samples=50)
    window.add(behind, heard_at_ms=NOW - 500)
    assert window.beat_heard_ms == NOW - 500


def test_a_change_in_flight_or_just_settled_holds_the_verdict_off() -> None:
    stopped = beat(NOW - 10_000)
    flying = ControlState(in_flight=InFlight("c", 4, 1, NOW - 60_000))
    assert judge(stopped, flying) is None
    assert judge(stopped, ControlState(settled_at_ms=NOW - 2_000)) is None
    hung_before = beat(NOW - 500, running_batch_id=7, running_since_ms=NOW - 90_000)
    assert judge(hung_before, ControlState(settled_at_ms=NOW - 30_000)) is None


# -- the window -----------------------------------------------------------------------------

def test_a_beat_is_heard_but_never_a_sample() -> None:
    window = QueryWindow("q1", window_s=60, max_samples=50)
    [batch] = simulate(Job(rates=[(0, 300)], per_unit=210, parallelism=2, instance_id="a"), 1)
    assert window.add(batch) is Admission.ACCEPTED
    running = beat(batch.batch_end_ms + 1_000, running_batch_id=batch.batch_id + 1,
                   running_since_ms=batch.batch_end_ms)
    assert window.add(running) is Admission.BEAT
    assert window.samples == (batch,) and window.last_sample == batch
    assert (window.last_seen_ms, window.beat) == (running.batch_end_ms, running)
    # Another instance heard since: the old one's beats say nothing of the query now.
    window.add(replace(batch, instance_id="b", batch_id=batch.batch_id + 5,
                       batch_start_ms=running.batch_end_ms, batch_end_ms=running.batch_end_ms + 1))
    assert window.beat is None


# -- the loop -------------------------------------------------------------------------------

def test_an_active_that_stops_beating_fails_over_within_seconds_and_not_before() -> None:
    h = Harness()
    trace = simulate(Job(rates=[(0, 300)], per_unit=210, parallelism=2, instance_id="a"), 30)
    beats = [beat(m.batch_end_ms, running_batch_id=m.batch_id + 1,
                  running_since_ms=m.batch_end_ms) for m in trace]
    h.feed([*trace, *beats, *(heartbeat("s1", m.batch_end_ms) for m in trace[::3])])
    last_heard_ms = end_ms(trace)
    # A batch that runs on for 20 s while the instance beats: no verdict.
    for _ in range(20):
        h.clock.advance(1)
        h.bus.publish_metrics(beat(h.clock.now_ms(), running_batch_id=trace[-1].batch_id + 1,
                                   running_since_ms=last_heard_ms),
                              heartbeat("s1", h.clock.now_ms()))
        h.loop.run(max_cycles=1)
    assert h.bus.sent_controls() == []
    silent_from_ms = h.clock.now_ms()
    keep_standbys_alive(h, 5)
    [promotion] = h.bus.sent_controls()
    assert (promotion.parameter, promotion.value) == ("active_instance", "s1")
    assert "no liveness beat for 3 s" in promotion.reason, promotion.reason
    assert promotion.issued_at_ms - silent_from_ms == 3_000  # the first cycle past 2.5 s


# -- the job's side: the batch it runs, from its checkpoint -----------------------------------

def offset_entry(checkpoint: Path, batch_id: int, planned_at_ms: int,
                 offsets: dict[str, int]) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join([
        "v2", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": planned_at_ms, "conf": {}}),
        "input_0:" + json.dumps({"sensors": offsets})]))


def commit_entry(checkpoint: Path, batch_id: int) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_running_batch_is_the_one_planned_past_the_last_commit(tmp_path: Path) -> None:
    assert running_batch(str(tmp_path)) is None  # no batch yet
    offset_entry(tmp_path, 0, 1_000, {"0": 100, "1": 90})
    commit_entry(tmp_path, 0)
    assert running_batch(str(tmp_path)) is None  # between batches
    offset_entry(tmp_path, 1, 2_000, {"0": 400, "1": 380})
    (tmp_path / "offsets" / ".1.crc").write_text("ignored")
    running = running_batch(str(tmp_path))
    assert running == RunningBatch(1, 2_000, {"sensors": {0: 100, 1: 90}},
                                   {"sensors": {0: 400, 1: 380}})
    planned = (SourcePartition("sensors", 0, 100, 400, 400),
               SourcePartition("sensors", 1, 90, 380, 380))
    assert planned_partitions(running) == planned
    # On the wire: what the batch will read is apart from what committed batches read.
    sent = beat_record(CTX, 3_000, running.batch_id, running.planned_at_ms, planned)
    assert (sent.partitions, sent.running_partitions, sent.input_rows) == ((), planned, 0)
    assert running_batch(f"file://{tmp_path}") == running
    assert running_batch("s3a://bucket/checkpoint") is None  # only local checkpoints are read


def test_the_first_batch_reads_from_its_planned_end_when_nothing_came_before(
        tmp_path: Path) -> None:
    offset_entry(tmp_path, 0, 1_000, {"0": 100})
    running = running_batch(str(tmp_path))
    assert running is not None and running.starts == {}
    assert planned_partitions(running) == (SourcePartition("sensors", 0, 100, 100, 100),)
