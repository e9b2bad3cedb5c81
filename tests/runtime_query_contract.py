"""The contract of `streaming_jobs.runtime.ports.QueryControl`, written once.

`tests/unit/streaming_jobs/runtime/test_query_port.py` runs it against `runtime.fakes.FakeQuery`,
`tests/spark/test_query_port.py` against `runtime.query.lifecycle.ElasticQuery` on real Spark
and the real broker. A `QueryHarness` gives the query under test, a desired state to start it
with, and `feed`, which makes its running run commit a batch with output (records produced to
its input, or the fake told to commit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.ports import Commit, QueryControl
from tests.support.waiting import until


class QueryHarness(Protocol):
    query: QueryControl
    desired: DesiredState
    other_output_topic: str
    """An existing topic the output can be swapped to."""
    timeout_s: float

    def feed(self) -> None: ...


def _committed(h: QueryHarness, run_id: str) -> Commit:
    h.feed()
    commit = h.query.wait_commit(run_id, h.timeout_s)
    assert commit is not None and commit.run_id == run_id, f"no commit of {run_id}"
    return commit


def started_query_commits_batches_of_its_run(h: QueryHarness) -> None:
    run = h.query.start(h.desired)
    assert h.query.is_active() and h.query.desired == h.desired
    commit = _committed(h, run)
    assert h.query.last_commit is not None and h.query.last_commit.run_id == run
    assert commit.end_ms >= commit.start_ms
    assert h.query.failure() is None and h.query.superseded() is None


def quiesce_and_stop_ends_the_run_without_a_failure(h: QueryHarness) -> None:
    run = h.query.start(h.desired)
    _committed(h, run)
    assert h.query.quiesce_and_stop(h.timeout_s)
    assert not h.query.is_active()
    assert h.query.failure() is None  # the runtime's own stop is not a failure


def restarting_is_a_new_run_from_where_the_last_one_committed(h: QueryHarness) -> None:
    first = h.query.start(h.desired)
    before = _committed(h, first)
    h.query.quiesce_and_stop(h.timeout_s)
    wider = replace(h.desired, epoch=h.desired.epoch + 1,
                    input_parallelism=h.desired.input_parallelism + 1)
    second = h.query.start(wider)
    assert second != first and h.query.desired == wider
    after = _committed(h, second)
    assert after.batch_id > before.batch_id  # the checkpoint went on, it did not start over


def warming_for_more_tasks_keeps_the_run_committing_and_says_what_it_did(
        h: QueryHarness) -> None:
    run = h.query.start(h.desired)
    before = _committed(h, run)
    wider = replace(h.desired, epoch=h.desired.epoch + 1,
                    input_parallelism=h.desired.input_parallelism + 1)
    note = h.query.warm_workers(wider)
    assert note and "warmed" in note
    assert h.query.warm_workers(h.desired) is None  # no more tasks: nothing to warm
    assert h.query.is_active() and h.query.desired == h.desired  # the same run, unchanged
    h.feed()
    latest = until(lambda: (c := h.query.last_commit) and c.batch_id > before.batch_id and c,
                   h.timeout_s, "a commit after the warming")
    assert latest.run_id == run


def relabelling_and_swapping_keep_the_run(h: QueryHarness) -> None:
    run = h.query.start(h.desired)
    _committed(h, run)
    relabelled = replace(h.desired, epoch=h.desired.epoch + 1)
    h.query.relabel(relabelled)
    assert h.query.desired == relabelled and h.query.is_active()
    assert h.query.hold(h.timeout_s)
    swapped = replace(relabelled, epoch=relabelled.epoch + 1,
                      output_topic=h.other_output_topic)
    h.query.swap(swapped)
    h.query.release()
    assert h.query.settle(relabelled, swapped) is None  # nothing asked of a cluster manager
    assert h.query.desired == swapped and h.query.is_active()
    assert _committed(h, run).run_id == run  # the same run carries on


def taking_ownership_reads_the_last_committed_batch(h: QueryHarness) -> None:
    run = h.query.start(h.desired)
    commit = _committed(h, run)
    h.query.quiesce_and_stop(h.timeout_s)
    last = h.query.last_commit  # batches may have committed after `commit` until the stop
    marker = h.query.take_ownership()
    assert last is not None and last.batch_id >= commit.batch_id
    assert marker is not None and marker.batch_id == last.batch_id


def each_run_is_labelled_with_its_desired_state(h: QueryHarness) -> None:
    context = h.query.context(h.desired)
    assert (context.config_epoch, context.input_parallelism, context.state_partitions,
            context.source_topics, context.sink_topics) == (
        h.desired.epoch, h.desired.input_parallelism, h.desired.state_partitions,
        (h.desired.input_topic,), (h.desired.output_topic,))


CONTRACT: tuple[Callable[[QueryHarness], None], ...] = (
    started_query_commits_batches_of_its_run,
    quiesce_and_stop_ends_the_run_without_a_failure,
    restarting_is_a_new_run_from_where_the_last_one_committed,
    warming_for_more_tasks_keeps_the_run_committing_and_says_what_it_did,
    relabelling_and_swapping_keep_the_run,
    taking_ownership_reads_the_last_committed_batch,
    each_run_is_labelled_with_its_desired_state,
)
