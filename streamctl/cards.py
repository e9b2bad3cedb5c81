"""Card-transaction load for the fraud-detection job: the event generator and its ledger.

Each account has a home country and its own sequence number (`account_seq`, from 0 per
generator), so the job's output can be checked per account: every acknowledged transaction
scored once, with `account_txn_count == account_seq + 1` while the account's state lives.
Most payments are ordinary; a few travel abroad or are unusually large, so the rules fire
now and then. Neighbours: `loadgen` (drives the producer, the rate and the ledger), `ledger`
(what every ledger counts).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from schemas import CardTransaction
from streamctl.ledger import AckedLedger

COUNTRIES = ("DE", "FR", "NL", "ES", "IT", "PL", "SE", "US")
CHANNELS = ("online", "in_store", "atm")
_CHANNEL_WEIGHTS = (0.6, 0.35, 0.05)
ABROAD_SHARE = 0.03
"""Share of payments made outside the account's home country (country_change fodder)."""
LARGE_SHARE = 0.005
"""Share of payments 20× the usual amount (amount_outlier fodder)."""


@dataclass
class CardEvents:
    """Makes transactions for `accounts` accounts; `hot_key_share` of them go to account 0."""

    accounts: int
    hot_key_share: float = 0.0
    low_priority_share: float = 0.3
    """Share of transactions with priority 0 (the only ones load shedding may drop)."""
    run_tag: str = ""
    """Makes txn ids unique across generator runs."""
    _next_seq: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.accounts < 1:
            raise ValueError(f"accounts must be >= 1, got {self.accounts}")
        for name in ("hot_key_share", "low_priority_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    def make(self, rng: random.Random, now_ms: int) -> CardTransaction:
        hot = self.hot_key_share and rng.random() < self.hot_key_share
        index = 0 if hot else rng.randrange(self.accounts)
        account = f"acct-{index:05d}"
        seq = self._next_seq[account]
        self._next_seq[account] += 1
        home = COUNTRIES[index % len(COUNTRIES)]
        country = rng.choice(COUNTRIES) if rng.random() < ABROAD_SHARE else home
        amount = round(rng.lognormvariate(3.0, 0.8) * (20 if rng.random() < LARGE_SHARE
                                                        else 1), 2)
        return CardTransaction(
            txn_id=f"{self.run_tag}{account}-{seq}", account_id=account,
            card_id=f"card-{index:05d}", account_seq=seq, amount=amount,
            merchant=f"merchant-{rng.randrange(500):03d}", country=country,
            event_time_ms=now_ms, channel=rng.choices(CHANNELS, _CHANNEL_WEIGHTS)[0],
            priority=0 if rng.random() < self.low_priority_share else 1)


@dataclass
class CardLedger(AckedLedger[CardTransaction]):
    """Acknowledged transactions: how many per account, and in all."""

    counts: Counter[str] = field(default_factory=Counter)

    def _keep(self, txn: CardTransaction) -> None:
        self.counts[txn.account_id] += 1

    def snapshot(self) -> dict[str, int]:
        """Acknowledged transactions per account now (safe while a producer records)."""
        with self._lock:
            return dict(self.counts)
