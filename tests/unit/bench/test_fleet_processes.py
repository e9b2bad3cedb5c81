"""`bench.fleet_processes`' synthetic queries behind: what a batch may read under its cap."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from bench.fleet_processes import capped


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=20),
       st.integers(1, 400))
def test_a_capped_batch_reads_each_partition_its_rounded_share_of_the_cap_and_never_past_the_end(
        offsets: list[tuple[int, int]], cap: int) -> None:
    before = [start for start, _ in offsets]
    latest = [start + waiting for start, waiting in offsets]
    read = capped(before, latest, cap)
    total = sum(latest) - sum(before)
    if total <= cap:
        assert read == latest
        return
    for start, end, got in zip(before, latest, read, strict=True):
        share = cap * ((end - start) / total)  # Spark's order: limit * (size / total)
        assert start <= got <= end and abs(got - start - share) < 1
        assert got > start or end == start  # no partition with records waiting starves
        # Rounded down, but up below one record (not apportioned to sum to the cap exactly).
        assert got - start == min(end - start, math.ceil(share) if share < 1 else
                                  math.floor(share))
    thin = sum(1 for start, end in zip(before, latest, strict=True)
               if 0 < cap * (end - start) / total < 1)
    assert sum(read) - sum(before) <= cap + thin


def test_a_batch_over_many_thin_partitions_reads_one_record_of_each_past_its_cap() -> None:
    assert capped([0] * 8, [2] * 8, 4) == [1] * 8


def test_a_batch_with_less_waiting_than_its_cap_reads_all_of_it() -> None:
    assert capped([3, 5], [10, 5], 100) == [10, 5]
