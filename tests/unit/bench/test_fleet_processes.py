"""`bench.fleet_processes`' synthetic queries behind: what a batch may read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.fleet_processes import _within


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=20),
       st.integers(0, 400))
def test_a_query_behind_reads_at_most_its_budget_partition_by_partition_and_never_past_the_end(
        offsets: list[tuple[int, int]], budget: int) -> None:
    before = [start for start, _ in offsets]
    planned = [start + more for start, more in offsets]
    read = _within(before, planned, budget)
    assert all(b <= r <= p for b, r, p in zip(before, read, planned, strict=True))
    assert sum(read) - sum(before) == min(budget, sum(planned) - sum(before))
    # Partition by partition: a partition is read only once every one before it is read out.
    first_short = next((i for i, (r, p) in enumerate(zip(read, planned, strict=True)) if r < p),
                       len(read))
    assert read[first_short + 1:] == before[first_short + 1:]
