"""Per-query results of pure functions of each record of a sliding sequence (or each pair of
consecutive records), kept while those stay in the sequence, so a cycle computes only what is
new.

Why: a query's window holds a minute of batches and twice as many end-offset probes, each
naming every source partition; re-deriving each one's offsets, lag and concurrency every cycle
cost O(window × partitions) per query per cycle, and looking each one up again cost most of a
controller's CPU at a few hundred queries. A window only slides: records leave at the front
and join at the back. So a sequence is matched against the one seen last time as a whole
(where the old one's newest part begins in it, then one comparison of the overlap, in C), and
only the records past the overlap are computed. A sequence that does not continue the last
one (a sample out of order, an epoch that empties the window) is computed again in full.

Each value is computed from frozen records by a pure function, so a kept one equals what the
function would return again. The one exception is the arrival scan it carries (`carried`,
`arrival.Scan`), whose level may have begun before the window's front, so it may differ from a
fresh scan's. The model's tests replay every committed trace both ways, with the memo and
afresh: the same decisions and figures.

The records are kept beside their values, so an identity cannot be reused by another record
while its entry lives; a sequence not used in a whole evaluation is dropped (`evaluation`).
The values come back as tuples: a caller cannot change what the memo keeps. Neighbours:
`model.evaluate` takes one per query from the loop (`controller.loop.memory`) and hands it to
`batches`, `arrival` and `probes`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

R = TypeVar("R")
T = TypeVar("T")


@dataclass(slots=True)
class _Whole:
    """What `Memo.whole` keeps of one function: the records and arguments it ran on, its
    value, and the per-record sequences it kept in the memo meanwhile."""

    records: list[Any]
    given: tuple[Hashable, ...]
    value: Any
    uses: frozenset[Hashable]


class Memo:
    def __init__(self) -> None:
        self._sequences: dict[Hashable, tuple[list[Any], tuple[Any, ...]]] = {}
        """Per (arity, what): the records last seen and their values (`each`, `pairs`)."""
        self._wholes: dict[Hashable, _Whole] = {}
        self._carried: dict[Hashable, Any] = {}
        self._used: set[Hashable] = set()

    @contextmanager
    def evaluation(self) -> Iterator[Memo]:
        """One evaluation of the query: what it does not use is forgotten after it."""
        self._used = set()
        try:
            yield self
        finally:
            for kept in (self._sequences, self._wholes, self._carried):
                for key in kept.keys() - self._used:
                    del kept[key]

    def each(self, function: Callable[[R], T], records: Sequence[R],
             what: Hashable = None) -> tuple[T, ...]:
        """`function(r)` for each of `records`, each computed once while its record stays
        (`what` names the function when it is made per call)."""
        return self._aligned((0, function if what is None else what), records, 0,
                             lambda start: [function(r) for r in records[start:]])

    def pairs(self, function: Callable[[R, R], T], records: Sequence[R],
              what: Hashable = None) -> tuple[T, ...]:
        """`function(before, after)` for each consecutive pair of `records`, each computed
        once while both stay."""
        return self._aligned((1, function if what is None else what), records, 1,
                             lambda start: [function(records[i], records[i + 1])
                                            for i in range(start, len(records) - 1)])

    def whole(self, function: Callable[..., T], records: Sequence[R], *given: Hashable) -> T:
        """`function(records, *given, memo=self)`, computed again only when `records` or
        `given` changed (it may keep per-record values in this memo too)."""
        self._used.add(function)
        kept = self._wholes.get(function)
        if (kept is not None and kept.given == given
                and len(kept.records) == len(records) == _overlap(kept.records, records)):
            self._used |= kept.uses  # what it keeps in this memo lives as long as it does
            return kept.value
        used_before = set(self._used)
        value = function(records, *given, memo=self)
        self._wholes[function] = _Whole(list(records), given, value,
                                        frozenset(self._used - used_before))
        return value

    def carried(self, make: Callable[[], T], key: Hashable) -> T:
        """The helper `make()` made for `key`, kept across evaluations while each uses it:
        `arrival.Scan`, the one stateful thing kept here, whose answer may depend on what it
        was shown before, unlike the values above; or a value that must stay the same object
        while it is used (the order `probes.intervals` gives a set of partitions)."""
        self._used.add(key)
        kept = self._carried.get(key)
        if kept is None:
            kept = make()
        _store(self._carried, key, kept)
        return kept

    def _aligned(self, key: Hashable, records: Sequence[Any], arity: int,
                 compute_from: Callable[[int], list[T]]) -> tuple[T, ...]:
        """The values of `records`' items (`arity` 0) or pairs (1): the kept ones for the
        part of `records` that continues the sequence seen last, `compute_from(i)` for the
        items from index i on."""
        self._used.add(key)
        old, values = self._sequences.get(key, ([], ()))
        overlap = _overlap(old, records)
        reused = values[len(old) - overlap:] if overlap > arity else ()
        found = reused + tuple(compute_from(len(reused)))
        _store(self._sequences, key, (list(records), found))
        return found


def _store(kept: dict[Hashable, Any], key: Hashable, value: Any) -> None:
    """`kept[key] = value`, keyed by `key` itself rather than an equal key stored before. A
    key may hold a query's set of partitions, made anew with each batch: a dict keeps the key
    first stored, and every lookup with the new one compared the two sets element by element
    (a thousand partitions, four lookups a cycle); after this one, by identity."""
    kept.pop(key, None)
    kept[key] = value


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
