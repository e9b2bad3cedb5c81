"""What a window's batches say on their own (`controller.core.batches`)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from controller.core.arrival import known_offsets
from controller.core.batches import partition_arrivals
from schemas import SourcePartition
from tests.unit.controller.traces import Job, simulate

SAMPLE = simulate(Job([(0, 300)], 210, 2), 1)[0]


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
    expected: dict[str, int] = {}
    for before, after in pairwise(samples):
        old, new = known_offsets(before), known_offsets(after)
        for key in old.keys() & new.keys():
            name = f"{key[0]}/{key[1]}"
            expected[name] = expected.get(name, 0) + max(
                0, new[key].latest_offset - old[key].latest_offset)
    assert partition_arrivals(tuple(samples)) == expected
