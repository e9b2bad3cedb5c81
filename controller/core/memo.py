"""Per-query results of pure functions of each record of a sliding sequence (or each pair of
consecutive records), kept while those stay in the sequence, so a cycle computes only what is
new.

Why: a query's window holds a minute of batches and twice as many end-offset probes, each
naming every source partition; re-deriving each one's offsets, lag and concurrency every cycle
cost O(window × partitions) per query per cycle, and looking each one up again cost most of a
controller's CPU at a few hundred queries. A window only slides: records leave at the front
and join at the back. So a sequence is matched against the one seen last time as a whole
(where the old one's newest part begins in it, then one comparison of the overlap, in C), and
only the records past the overlap are computed. Anything else (a sample out of order, an epoch
that empties the window) recomputes the sequence.

Each value is computed from frozen records by a pure function, so a kept one equals what the
function would return again: decisions are the same with or without a memo (the model's tests
replay traces both ways). The records are kept beside their values, so an identity cannot be
reused by another record while its entry lives; a sequence not used in a whole evaluation is
dropped (`evaluation`). Neighbours: `model.evaluate` takes one per query from the loop
(`controller.loop.memory`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

R = TypeVar("R")
T = TypeVar("T")


class Memo:
    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[list[Any], list[Any]]] = {}
        self._used: set[Hashable] = set()

    @contextmanager
    def evaluation(self) -> Iterator[Memo]:
        """One evaluation of the query: the sequences it does not use are forgotten after
        it."""
        self._used = set()
        try:
            yield self
        finally:
            for what in self._kept.keys() - self._used:
                del self._kept[what]

    def each(self, function: Callable[[R], T], records: Sequence[R],
             what: Hashable = None) -> list[T]:
        """`[function(r) for r in records]`, each computed once while its record stays
        (`what` names the function when it is made per call)."""
        return self._aligned(function if what is None else what, records, 0,
                             lambda start: [function(r) for r in records[start:]])

    def pairs(self, function: Callable[[R, R], T], records: Sequence[R],
              what: Hashable = None) -> list[T]:
        """`function(before, after)` for each consecutive pair of `records`, each computed
        once while both stay."""
        return self._aligned(function if what is None else what, records, 1,
                             lambda start: [function(records[i], records[i + 1])
                                            for i in range(start, len(records) - 1)])

    def whole(self, function: Callable[..., T], records: Sequence[R], *given: Hashable) -> T:
        """`function(records, *given, memo=self)`, computed again only when `records` or
        `given` changed (it may keep per-record values in this memo too)."""
        self._used.add(function)
        old, kept = self._kept.get(function, ([], []))
        if kept and kept[0] == given and len(old) == len(records) == _overlap(old, records):
            self._used |= kept[2]  # what it keeps in this memo lives as long as it does
            return kept[1]
        used_before = set(self._used)
        found = function(records, *given, memo=self)
        self._kept[function] = (list(records), [given, found, self._used - used_before])
        return found

    def _aligned(self, what: Hashable, records: Sequence[Any], arity: int,
                 compute_from: Callable[[int], list[T]]) -> list[T]:
        """The values of `records`' items (`arity` 0) or pairs (1): the kept ones for the
        part of `records` that continues the sequence seen last, `compute_from(i)` for the
        items from index i on."""
        self._used.add(what)
        old, values = self._kept.get(what, ([], []))
        kept = _overlap(old, records)
        reused = values[len(old) - kept:len(values)] if kept > arity else []
        found = reused + compute_from(len(reused))
        self._kept[what] = (list(records), found)
        return found


def _overlap(old: list[object], new: Sequence[object]) -> int:
    """How many of `old`'s newest records begin `new`, in order (0: none)."""
    if not old or not new:
        return 0
    first = new[0]
    for start, record in enumerate(old):
        if record is first:
            kept = len(old) - start
            # Identical records compare equal without their __eq__; a different record that
            # equals one kept gives the same value anyway (pure functions of frozen records).
            return kept if kept <= len(new) and old[start:] == list(new[:kept]) else 0
    return 0
