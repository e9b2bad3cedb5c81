"""The per-query memo: values of a sliding sequence's records and pairs, computed once each."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from controller.core.memo import Memo


@dataclass(frozen=True)
class Record:
    n: int


class Counted:
    """A pure function that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def one(self, record: Record) -> int:
        self.calls += 1
        return record.n * 10

    def two(self, before: Record, after: Record) -> int:
        self.calls += 1
        return after.n - before.n


def test_a_sliding_sequence_computes_only_the_records_that_joined_it() -> None:
    memo, f = Memo(), Counted()
    records = [Record(n) for n in range(6)]
    assert memo.each(f.one, records[:4]) == (0, 10, 20, 30)
    assert memo.each(f.one, records[1:6]) == (10, 20, 30, 40, 50)
    assert f.calls == 6


def test_a_sliding_sequence_computes_only_the_pairs_that_joined_it() -> None:
    memo, f = Memo(), Counted()
    records = [Record(n * n) for n in range(6)]
    assert memo.pairs(f.two, records[:4]) == (1, 3, 5)
    assert memo.pairs(f.two, records[2:6]) == (5, 7, 9)
    assert f.calls == 5


def test_a_record_out_of_order_recomputes_the_sequence_rightly() -> None:
    memo, f = Memo(), Counted()
    a, b, c = Record(1), Record(2), Record(3)
    memo.pairs(f.two, [a, c])
    assert memo.pairs(f.two, [a, b, c]) == (1, 1)


def test_the_values_of_records_and_of_pairs_are_kept_apart() -> None:
    memo, f = Memo(), Counted()
    records = [Record(1), Record(3)]
    assert memo.each(f.one, records) == (10, 30)
    assert memo.pairs(f.two, records, what=f.one) == (2,)


def test_a_sequence_not_used_in_an_evaluation_is_forgotten() -> None:
    memo, f = Memo(), Counted()
    records = [Record(1), Record(2)]
    with memo.evaluation():
        memo.each(f.one, records)
    with memo.evaluation():
        pass
    with memo.evaluation():
        memo.each(f.one, records)
    assert f.calls == 4


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.booleans()), max_size=12))
def test_every_value_is_what_the_function_gives_whatever_the_sequence_does(
        steps: list[tuple[int, int, bool]]) -> None:
    """Records leave at the front, join at the back, or the sequence is shuffled: the memo's
    values always equal the function's on the sequence as it is."""
    memo, f = Memo(), Counted()
    sequence: list[Record] = []
    made = 0
    for dropped, added, reverse in steps:
        sequence = sequence[dropped:] + [Record(made + i) for i in range(added)]
        made += added
        if reverse:
            sequence = sequence[::-1]
        assert memo.each(f.one, sequence) == tuple(f.one(r) for r in sequence)
        assert memo.pairs(f.two, tuple(sequence)) == tuple(
            f.two(x, y) for x, y in pairwise(sequence))


def test_what_a_whole_window_function_keeps_lives_while_its_value_is_reused() -> None:
    memo, f = Memo(), Counted()

    def total(records: list[Record], *, memo: Memo) -> int:
        return sum(memo.each(f.one, records))

    records = [Record(n) for n in range(4)]
    for window in (records[:3], records[:3], records[1:4]):
        with memo.evaluation():
            memo.whole(total, window)
    assert f.calls == 4
