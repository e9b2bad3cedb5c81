"""What every load's ledger shares: the records the broker acknowledged or refused, counted
under one lock, since deliveries arrive on the producer's thread while a test or the demo reads.

Each event type's ledger keeps its own account of an acknowledged record (`_keep`): per sensor
and window in `loadgen.Ledger`, per account in `cards.CardLedger`, the event ids in
`clicks.ClickLedger`. Neighbours: `loadgen` counts into them.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass(kw_only=True)
class AckedLedger(ABC, Generic[R]):
    """Acknowledged records of type `R`: how many, and what the subclass keeps of each."""

    acked: int = 0
    failed: int = 0
    """Records the broker refused (counted by the producer's delivery callback)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, record: R) -> None:
        with self._lock:
            self._keep(record)
            self.acked += 1

    def refused(self) -> None:
        with self._lock:
            self.failed += 1

    @abstractmethod
    def _keep(self, record: R) -> None:
        """Note what this ledger keeps of an acknowledged `record` (called under the lock)."""
