"""What a window's batches say on their own (`controller.core.batches`)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from hypothesis import example, given
from hypothesis import strategies as st

from controller.core.arrival import Interval, intervals
from controller.core.batches import PartitionShares, partition_arrivals
from schemas import SourcePartition, TaskMetrics
from tests.unit.controller.traces import T0_MS, Job, simulate

SAMPLE = simulate(Job([(0, 300)], 210, 2), 1)[0]


def known(sample: TaskMetrics) -> dict[tuple[str, int], int]:
    """The latest offset of each partition the sample's source knew."""
    return {(p.topic, p.partition): p.latest_offset for p in sample.partitions
            if p.latest_offset >= 0}


@given(st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 40)), max_size=4),
                min_size=1, max_size=8))
def test_the_arrivals_per_partition_are_the_sums_of_each_pairs_growth(
        steps: list[list[tuple[int, int]]]) -> None:
    """Partitions that grow, shrink (a topic recreated), appear or go: each partition's
    arrivals are the sum over consecutive samples of what it grew by (never below 0)."""
    latest: dict[int, int] = {}
    samples = []
    for step in steps:
        for partition, grown in step:
            latest[partition] = max(0, latest.get(partition, 0) + grown)
        shown = {p: o for p, o in latest.items() if (p + len(samples)) % 5 or len(steps) < 4}
        samples.append(replace(SAMPLE, batch_id=len(samples), partitions=tuple(
            SourcePartition("in", p, 0, 0, o) for p, o in sorted(shown.items()))))
    expected: dict[tuple[str, int], int] = {}
    for before, after in pairwise(samples):
        old, new = known(before), known(after)
        for key in old.keys() & new.keys():
            expected[key] = expected.get(key, 0) + max(0, new[key] - old[key])
    assert partition_arrivals(tuple(samples)) == expected


@given(st.lists(st.tuples(st.integers(0, 3_000), st.lists(
    st.tuples(st.integers(0, 3), st.integers(-1, 60)), max_size=5)), min_size=2, max_size=8))
@example([(0, [(1, 5), (1, 7)]), (1_000, [(1, 9), (1, 20)])])  # listed twice, the same way
def test_the_arrival_intervals_are_each_pairs_growth_over_the_partitions_both_knew(
        steps: list[tuple[int, list[tuple[int, int]]]]) -> None:
    """Whatever order a sample lists its partitions in, listed twice, unknown (-1) or shrunk:
    an interval per pair of samples that started in order and knew a partition in common, of
    the growth of those partitions (never below 0 each)."""
    samples, start = [], T0_MS
    for waited, listed in steps:
        start += waited
        samples.append(replace(SAMPLE, batch_id=len(samples), batch_start_ms=start,
                               partitions=tuple(SourcePartition("in", p, 0, 0, o)
                                                for p, o in listed)))
    expected = []
    for before, after in pairwise(samples):
        old, new = known(before), known(after)
        common = old.keys() & new.keys()
        if after.batch_start_ms > before.batch_start_ms and common:
            expected.append(Interval(before.batch_start_ms, after.batch_start_ms,
                                     sum(max(0, new[k] - old[k]) for k in common)))
    assert intervals(samples) == expected


def test_a_topics_share_sums_its_partitions_shares_largest_first_whatever_their_order() -> None:
    """The same float in every process: summed in a fixed order (the largest share first, ties
    by name), not in the order a set of topic names iterates."""
    amounts = {("t1", 0): 1, ("x", 0): 6, ("t3", 0): 3, ("t2", 0): 1}
    for ordered in (amounts, dict(reversed(amounts.items()))):
        shares = PartitionShares.of(ordered)
        assert shares.of_topics({"t1", "t2", "t3"}) == 3 / 11 + 1 / 11 + 1 / 11
        assert (shares.largest, shares.largest_share, shares.partitions) == ("x/0", 6 / 11, 4)
    tied = PartitionShares.of({("in", 10): 5, ("in", 2): 5})
    assert tied.largest == "in/10"  # the first by name among equal shares
    assert not PartitionShares.of({("in", 0): 0}) and not PartitionShares.of({})
