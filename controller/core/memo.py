"""Per-query results of pure functions of one sample or probe (or a consecutive pair), kept
while those stay in the window, so a cycle computes only what is new.

Why: a query's window holds a minute of batches and twice as many end-offset probes, each
naming every source partition; re-deriving each one's offsets, lag and concurrency every cycle
cost O(window × partitions) per query per cycle, most of a controller's CPU at a few hundred
queries. Each value is computed from frozen records by a pure function, so a kept one equals
what the function would return again: decisions are the same with or without a memo (the
model's tests replay traces both ways).

Owns `Memo`: values keyed by (what, the records' identities). The records are kept beside
their values, so an identity cannot be reused by another record while its entry lives; an entry
not used in a whole evaluation is dropped (`evaluation`), as the window drops its records.
Neighbours: `model.evaluate` takes one per query from the loop (`controller.loop.memory`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
_Entry = tuple[tuple[object, ...], Any]


class Memo:
    def __init__(self) -> None:
        self._kept: dict[Hashable, _Entry] = {}
        self._used: dict[Hashable, _Entry] = {}

    @contextmanager
    def evaluation(self) -> Iterator[Memo]:
        """One evaluation of the query: what it does not use is forgotten after it."""
        self._used = {}
        try:
            yield self
        finally:
            self._kept, self._used = self._used, {}

    def of(self, what: Hashable, records: tuple[object, ...], compute: Callable[[], T]) -> T:
        """`compute()`'s value for `records` (one or two) under `what`, computed once while
        they stay in the window."""
        # Keyed by identity alone: the entry holds its records, and while an object lives no
        # other one has its id, so a hit is always for these very records.
        key = (what, *map(id, records))
        entry = self._used.get(key)
        if entry is None:
            entry = self._kept.get(key)
            if entry is None:
                entry = (records, compute())
            self._used[key] = entry
        return entry[1]

    def apply(self, function: Callable[..., T], *records: object) -> T:
        """`function(*records)`, computed once while the records stay in the window."""
        return self.of(function, records, lambda: function(*records))
