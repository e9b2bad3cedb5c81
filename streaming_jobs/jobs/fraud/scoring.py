"""The fraud job's scoring call: versioned scoring functions behind a remote-call cost.

A real deployment calls a model-serving endpoint per transaction; here each version is a
deterministic function of the transaction and its account's features, and `RemoteScorer`
adds the call's latency (`cost_ms` per record, slept once per call batch). The latency is
waiting, not computing, so on 2 cores the job's capacity grows with the number of Spark
tasks running the stateful operator (its state partitions), as it would with a real remote
service. Versions are registered in `SCORERS` so the runtime can switch between them at a
batch boundary, without a restart (the UDF-version control action).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from streaming_jobs.api import SwappableFunction


@dataclass(frozen=True)
class Features:
    """What the scoring call sends per transaction."""

    txn_id: str
    amount: float
    amount_z: float
    txns_in_window: int
    account_txn_count: int
    channel: str


Scorer = Callable[[Features], float]


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def score_v1(f: Features) -> float:
    """A small logistic model: amount z-score and recent velocity raise the score."""
    return _logistic(-4.0 + 0.6 * max(f.amount_z, 0.0) + 0.3 * f.txns_in_window
                     + (0.5 if f.channel == "online" else 0.0))


def score_v2(f: Features) -> float:
    """v1 plus a stable per-transaction jitter (a retrained model that disagrees a little)."""
    digest = hashlib.blake2b(f.txn_id.encode(), digest_size=2).digest()
    jitter = (int.from_bytes(digest, "big") / 65535.0 - 0.5) * 0.1
    return min(max(score_v1(f) + jitter, 0.0), 1.0)


SCORERS: dict[str, Scorer] = {"v1": score_v1, "v2": score_v2}


@dataclass(frozen=True)
class RemoteScorer:
    """One call to the model service for a batch of transactions: cost_ms per record."""

    score: SwappableFunction
    """One of `SCORERS`: the version in force for the batch."""
    cost_ms: float
    sleep: Callable[[float], None] = time.sleep

    @property
    def version(self) -> str:
        return self.score.version

    def __call__(self, batch: Sequence[Features]) -> list[float]:
        if self.cost_ms > 0 and batch:
            self.sleep(len(batch) * self.cost_ms / 1000.0)
        return [self.score(f) for f in batch]
