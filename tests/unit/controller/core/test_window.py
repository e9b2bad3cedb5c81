"""Sliding windows: by time and count, each sample once, only the configuration in force."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from controller.core.window import Admission, QueryWindow, Windows
from controller.settings import ModelSettings
from schemas import Role
from tests.unit.controller.traces import T0_MS, Job, simulate

TRACE = simulate(Job([(0, 300)], 210, 2), 30)


def window(max_samples: int = 100) -> QueryWindow:
    return QueryWindow("q1", window_s=10, max_samples=max_samples)


def test_duplicates_are_ignored_but_heartbeats_are_not() -> None:
    w = window()
    assert w.add(TRACE[0]) is Admission.ACCEPTED
    assert w.add(TRACE[0]) is Admission.DUPLICATE
    beat = replace(TRACE[1], batch_id=-1, input_rows=0)
    assert w.add(beat) is Admission.ACCEPTED
    later = replace(beat, batch_start_ms=beat.batch_start_ms + 10_000,
                    batch_end_ms=beat.batch_end_ms + 10_000)
    assert w.add(later) is Admission.ACCEPTED
    assert len(w.samples) == 3


def test_a_newer_epoch_drops_older_samples_and_refuses_them_later() -> None:
    w = window()
    for s in TRACE[:5]:
        w.add(s)
    assert w.add(replace(TRACE[5], config_epoch=2)) is Admission.ACCEPTED
    assert [s.batch_id for s in w.samples] == [5]
    assert w.add(TRACE[6]) is Admission.STALE_EPOCH


def test_required_epoch_forgets_everything_older() -> None:
    w = window()
    for s in TRACE[:5]:
        w.add(s)
    w.require_epoch(3)
    assert w.samples == ()
    assert w.add(replace(TRACE[6], config_epoch=2)) is Admission.STALE_EPOCH


def test_prune_keeps_window_s_and_max_samples() -> None:
    w = window(max_samples=8)
    for s in TRACE:
        w.add(s)
    assert len(w.samples) == 8
    w.prune(TRACE[-1].batch_end_ms)
    assert all(s.batch_end_ms >= TRACE[-1].batch_end_ms - 10_000 for s in w.samples)
    w.prune(T0_MS + 3_600_000)
    assert w.samples == ()


def test_a_reporting_query_keeps_three_samples_however_long_its_batches() -> None:
    """36 s batches (a backlogged stateful job on 2 state partitions): the 60 s window holds
    one or two, too few for a trend, so it keeps the newest three while they keep coming."""
    w = window()
    starts = [0, 36_000, 72_000, 108_000]
    for n, start in enumerate(starts):
        w.add(replace(TRACE[0], batch_id=n, batch_start_ms=T0_MS + start,
                      batch_end_ms=T0_MS + start + 36_000, busy_ms=36_000))
    w.prune(T0_MS + 150_000)
    assert [s.batch_id for s in w.samples] == [1, 2, 3]
    w.prune(T0_MS + 150_000 + 61_000)  # silent for longer than the window: nothing is kept
    assert w.samples == ()
    assert w.last_sample is not None and w.last_sample.batch_id == 3


def test_an_epoch_that_only_adds_executors_keeps_the_samples() -> None:
    w = window()
    for s in TRACE[:5]:
        w.add(s)
    w.carry_to(1)
    assert w.add(replace(TRACE[5], config_epoch=1)) is Admission.ACCEPTED
    w.require_epoch(1)  # its ack
    assert [s.batch_id for s in w.samples] == [s.batch_id for s in TRACE[:6]]
    w.require_epoch(2)  # any other change still starts afresh
    assert w.samples == ()


def test_out_of_order_samples_are_sorted_and_standby_ignored() -> None:
    w = window()
    w.add(TRACE[3])
    w.add(TRACE[1])
    assert w.add(replace(TRACE[2], role=Role.STANDBY)) is Admission.STANDBY
    assert [s.batch_id for s in w.samples] == [1, 3]


def test_a_batch_read_after_a_later_beat_of_its_instance_is_the_newest_sample() -> None:
    """The beats have their own thread: one stamped after a batch ended may be read first."""
    w = window()
    w.add(TRACE[1])
    beat = replace(TRACE[1], batch_id=-1, input_rows=0, beat=True,
                   batch_end_ms=TRACE[2].batch_end_ms + 500)
    assert w.add(beat) is Admission.BEAT
    assert w.add(TRACE[2]) is Admission.ACCEPTED
    assert w.last_sample is TRACE[2] and w.last_seen_ms == beat.batch_end_ms
    # Another instance's, ending before the beat: not the instance last heard.
    w.add(replace(TRACE[2], instance_id="another", batch_end_ms=TRACE[2].batch_end_ms + 100))
    assert w.last_sample is TRACE[2]


def test_windows_track_at_most_max_queries() -> None:
    ws = Windows(ModelSettings(max_queries=1))
    assert ws.add(TRACE[0]) is Admission.ACCEPTED
    assert ws.add(replace(TRACE[1], query_id="q2")) is None
    assert [w.query_id for w in ws] == ["q1"]


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(200, 30_000), st.integers(0, 20_000)),
                max_size=40))
def test_pruning_keeps_what_ended_within_the_window_or_the_newest_three(
        steps: list[tuple[int, int, int]]) -> None:
    """Whatever the batches' lengths (so ends in order or not): a prune after a sample joined,
    or once none ended within the window, leaves the samples that ended within it, or the
    newest three when fewer did, or none; a prune between two joins leaves the window as it
    was, so what the model derives from it holds until the next batch."""
    w, start, batch = window(), T0_MS, 0
    for added, length, waited in steps:
        for _ in range(added):
            w.add(replace(TRACE[0], batch_id=batch, batch_start_ms=start,
                          batch_end_ms=start + length))
            start, batch = start + 500, batch + 1
        now_ms = start + waited
        before = w.samples
        w.prune(now_ms)
        inside = [s for s in before if s.batch_end_ms >= now_ms - 10_000]
        if not added and inside:
            inside = list(before)
        elif before and before[0].batch_end_ms < now_ms - 10_000 and 0 < len(inside) < 3:
            inside = list(before[-3:])
        elif before and before[0].batch_end_ms >= now_ms - 10_000:
            inside = list(before)
        assert list(w.samples) == inside
