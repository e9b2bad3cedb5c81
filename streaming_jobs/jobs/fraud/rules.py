"""The fraud-detection job's per-account state and rules: pure functions, no Spark, no I/O.

`step(state, txn, rules)` folds one transaction into an account's state and says which rules
fired; the Spark operator (`fraud.job`) only stores the state between batches and calls it
in event-time order. Keeping this pure means the rules are unit-tested on plain values and
behave the same in a test, in a Spark worker and after a restart from the checkpoint.

Rules (thresholds in `FraudRules`):
- **velocity**: more than `velocity_max_txns` transactions within `velocity_window_s` of
  event time (this one included);
- **amount_outlier**: after `min_history` transactions, an amount more than `amount_z`
  standard deviations (floored at `min_amount_std`) above the account's running mean;
- **country_change**: a different country than the previous transaction, less than
  `country_change_s` after it (travel that fast is unlikely).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

VELOCITY = "velocity"
AMOUNT_OUTLIER = "amount_outlier"
COUNTRY_CHANGE = "country_change"


@dataclass(frozen=True)
class FraudRules:
    """Rule thresholds and the state horizon of the fraud-detection job."""

    velocity_max_txns: int = 5
    """Velocity fires when an account has more than this many transactions in the window."""
    velocity_window_s: float = 60.0
    """Sliding event-time window of the velocity rule; also how long timestamps are kept."""
    amount_z: float = 4.0
    """Amount outlier threshold, in (floored) standard deviations above the running mean."""
    min_amount_std: float = 1.0
    """Floor of the standard deviation, so a few equal amounts do not flag every change."""
    min_history: int = 5
    """Transactions an account needs before the amount rule may fire."""
    country_change_s: float = 3600.0
    """A country change within this many event-time seconds fires country_change."""
    state_ttl_s: float = 86_400.0
    """An account idle this long in event time (past the watermark) has its state dropped."""
    rule_weights: tuple[tuple[str, float], ...] = (
        (VELOCITY, 0.5), (AMOUNT_OUTLIER, 0.6), (COUNTRY_CHANGE, 0.7))
    """Probability each fired rule adds to the score (combined as independent evidence)."""
    alert_threshold: float = 0.8
    """A scored transaction is an alert when its score is at least this."""

    def __post_init__(self) -> None:
        if self.velocity_max_txns < 1 or self.min_history < 1:
            raise ValueError("velocity_max_txns and min_history must be >= 1")
        if min(self.velocity_window_s, self.country_change_s, self.state_ttl_s) <= 0:
            raise ValueError("velocity_window_s, country_change_s, state_ttl_s must be > 0")
        if self.state_ttl_s < self.velocity_window_s:
            raise ValueError("state_ttl_s must cover velocity_window_s, or velocity forgets")
        if not 0 < self.alert_threshold <= 1:
            raise ValueError("alert_threshold must be in (0, 1]")


@dataclass(frozen=True)
class AccountState:
    """What the job remembers of one account (stored by Spark between batches)."""

    txn_count: int = 0
    amount_mean: float = 0.0
    amount_m2: float = 0.0
    """Sum of squared deviations from the mean (Welford), so the std needs no history."""
    last_country: str = ""
    last_event_ms: int = -1
    recent_ms: tuple[int, ...] = ()
    """Event times within the velocity window of the newest transaction, oldest first."""
    max_event_ms: int = -1
    """Newest event time seen: the state expires `state_ttl_s` after it."""

    @property
    def amount_std(self) -> float:
        return math.sqrt(self.amount_m2 / (self.txn_count - 1)) if self.txn_count > 1 else 0.0


@dataclass(frozen=True)
class Txn:
    """The fields of a transaction the rules read."""

    event_time_ms: int
    amount: float
    country: str


@dataclass(frozen=True)
class Assessment:
    """The rules that fired on one transaction and the state-derived scoring features."""

    rules_fired: tuple[str, ...]
    account_txn_count: int
    amount_z: float
    txns_in_window: int


def velocity_fires(recent_ms: tuple[int, ...], rules: FraudRules) -> bool:
    return len(recent_ms) > rules.velocity_max_txns


def amount_z(state: AccountState, amount: float, rules: FraudRules) -> float:
    """Standard deviations above the running mean, before `amount` joins the statistics."""
    if state.txn_count == 0:
        return 0.0
    return (amount - state.amount_mean) / max(state.amount_std, rules.min_amount_std)


def amount_outlier_fires(state: AccountState, amount: float, rules: FraudRules) -> bool:
    return state.txn_count >= rules.min_history and amount_z(state, amount, rules) > rules.amount_z


def country_change_fires(state: AccountState, txn: Txn, rules: FraudRules) -> bool:
    if not state.last_country or state.last_country == txn.country:
        return False
    # abs: a transaction may arrive slightly out of event-time order (within the watermark).
    return abs(txn.event_time_ms - state.last_event_ms) < rules.country_change_s * 1000


def window_after(recent_ms: tuple[int, ...], event_time_ms: int,
                 rules: FraudRules) -> tuple[int, ...]:
    """`recent_ms` with `event_time_ms` added, keeping the window before the newest time."""
    newest = max(event_time_ms, *recent_ms) if recent_ms else event_time_ms
    horizon = newest - int(rules.velocity_window_s * 1000)
    return tuple(sorted(t for t in (*recent_ms, event_time_ms) if t > horizon))


def with_amount(state: AccountState, amount: float) -> AccountState:
    """Welford's update of count, mean and M2."""
    count = state.txn_count + 1
    delta = amount - state.amount_mean
    mean = state.amount_mean + delta / count
    return replace(state, txn_count=count, amount_mean=mean,
                   amount_m2=state.amount_m2 + delta * (amount - mean))


def step(state: AccountState, txn: Txn, rules: FraudRules) -> tuple[AccountState, Assessment]:
    """Fold one transaction into the account's state; the rules see the state before it."""
    recent = window_after(state.recent_ms, txn.event_time_ms, rules)
    fired = tuple(name for name, hit in (
        (VELOCITY, velocity_fires(recent, rules)),
        (AMOUNT_OUTLIER, amount_outlier_fires(state, txn.amount, rules)),
        (COUNTRY_CHANGE, country_change_fires(state, txn, rules)),
    ) if hit)
    z = amount_z(state, txn.amount, rules)
    after = replace(with_amount(state, txn.amount), last_country=txn.country,
                    last_event_ms=txn.event_time_ms, recent_ms=recent,
                    max_event_ms=max(state.max_event_ms, txn.event_time_ms))
    return after, Assessment(fired, after.txn_count, z, len(recent))


def combined_score(model_score: float, rules_fired: tuple[str, ...], rules: FraudRules) -> float:
    """1 − P(no evidence): the model's score and each fired rule's weight as independent."""
    weights = dict(rules.rule_weights)
    clean = 1.0 - min(max(model_score, 0.0), 1.0)
    for name in rules_fired:
        clean *= 1.0 - weights.get(name, 0.0)
    return 1.0 - clean


def expiry_ms(state: AccountState, watermark_ms: int, rules: FraudRules) -> int:
    """When the account's state times out: TTL after its newest event, never behind the
    watermark (Spark refuses a timeout at or before the current watermark)."""
    return max(state.max_event_ms + int(rules.state_ttl_s * 1000), watermark_ms + 1)
