"""The fraud job's rules and scoring as pure functions (no Spark): each rule fires exactly at
its threshold, the state folds transactions like a running count/mean/std, and the score
combines the model with the rules that fired."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from streaming_jobs.api import SwappableFunction
from streaming_jobs.jobs.fraud.rules import (
    AMOUNT_OUTLIER,
    COUNTRY_CHANGE,
    VELOCITY,
    AccountState,
    FraudRules,
    Txn,
    combined_score,
    expiry_ms,
    step,
)
from streaming_jobs.jobs.fraud.scoring import Features, RemoteScorer, score_v1

T0 = 1_700_000_000_000
RULES = FraudRules()


def fold(txns: list[Txn], rules: FraudRules = RULES) -> tuple[AccountState, list[tuple[str, ...]]]:
    fired: list[tuple[str, ...]] = []
    state = AccountState()
    for txn in txns:
        state, verdict = step(state, txn, rules)
        fired.append(verdict.rules_fired)
    return state, fired


def test_count_and_running_statistics_match_the_history() -> None:
    amounts = [12.0, 30.5, 7.25, 19.0, 44.0, 3.0]
    state, _ = fold([Txn(T0 + i * 600_000, a, "DE") for i, a in enumerate(amounts)])
    assert state.txn_count == len(amounts)
    assert state.amount_mean == pytest.approx(statistics.mean(amounts))
    assert state.amount_std == pytest.approx(statistics.stdev(amounts))


def test_velocity_fires_only_above_the_limit_within_the_window() -> None:
    limit = RULES.velocity_max_txns
    burst = [Txn(T0 + i * 1000, 10.0, "DE") for i in range(limit + 1)]
    _, fired = fold(burst)
    assert [VELOCITY in f for f in fired] == [False] * limit + [True]
    spread = [Txn(T0 + i * 20_000, 10.0, "DE") for i in range(limit + 3)]  # 3 per minute
    _, fired = fold(spread)
    assert not any(VELOCITY in f for f in fired)


def test_velocity_window_forgets_old_timestamps() -> None:
    state, _ = fold([Txn(T0 + i, 10.0, "DE") for i in range(4)])
    later = T0 + int(RULES.velocity_window_s * 1000) + 10
    after, verdict = step(state, Txn(later, 10.0, "DE"), RULES)
    assert after.recent_ms == (later,)
    assert verdict.txns_in_window == 1


def test_amount_outlier_needs_history_and_a_large_deviation() -> None:
    history = [Txn(T0 + i * 600_000, 20.0 + i % 2, "DE") for i in range(RULES.min_history)]
    state, fired = fold(history)
    assert not any(fired)
    _, big = step(state, Txn(T0 + 10**8, 500.0, "DE"), RULES)
    _, normal = step(state, Txn(T0 + 10**8, 22.0, "DE"), RULES)
    assert big.rules_fired == (AMOUNT_OUTLIER,)
    assert normal.rules_fired == ()
    young, _ = fold(history[:RULES.min_history - 1])
    assert step(young, Txn(T0 + 10**8, 500.0, "DE"), RULES)[1].rules_fired == ()


def test_country_change_fires_only_when_fast() -> None:
    state, _ = fold([Txn(T0, 10.0, "DE")])
    soon = T0 + int(RULES.country_change_s * 1000) - 1
    late = T0 + int(RULES.country_change_s * 1000) + 1
    assert step(state, Txn(soon, 10.0, "FR"), RULES)[1].rules_fired == (COUNTRY_CHANGE,)
    assert step(state, Txn(late, 10.0, "FR"), RULES)[1].rules_fired == ()
    assert step(state, Txn(soon, 10.0, "DE"), RULES)[1].rules_fired == ()


def test_account_txn_count_is_the_count_after_the_transaction() -> None:
    state = AccountState()
    counts = []
    for i in range(7):
        state, verdict = step(state, Txn(T0 + i * 600_000, 5.0, "DE"), RULES)
        counts.append(verdict.account_txn_count)
    assert counts == list(range(1, 8))


def test_score_combines_model_and_rules() -> None:
    assert combined_score(0.1, (), RULES) == pytest.approx(0.1)
    weights = dict(RULES.rule_weights)
    both = combined_score(0.1, (VELOCITY, COUNTRY_CHANGE), RULES)
    assert both == pytest.approx(1 - 0.9 * (1 - weights[VELOCITY]) * (1 - weights[COUNTRY_CHANGE]))
    every_rule = (AMOUNT_OUTLIER, COUNTRY_CHANGE, VELOCITY)
    assert combined_score(0.0, every_rule, RULES) >= RULES.alert_threshold


def test_expiry_follows_newest_event_but_never_falls_behind_the_watermark() -> None:
    state = replace(AccountState(), max_event_ms=T0)
    ttl_ms = int(RULES.state_ttl_s * 1000)
    assert expiry_ms(state, T0 - 5000, RULES) == T0 + ttl_ms
    assert expiry_ms(state, T0 + ttl_ms + 7, RULES) == T0 + ttl_ms + 8


def test_rules_refuse_inconsistent_thresholds() -> None:
    with pytest.raises(ValueError, match="state_ttl_s"):
        FraudRules(state_ttl_s=10, velocity_window_s=60)
    with pytest.raises(ValueError, match="alert_threshold"):
        FraudRules(alert_threshold=0)


def test_remote_scorer_pays_the_cost_per_record() -> None:
    """(An unknown version is refused when the job's configuration is bound:
    test_config.test_a_function_version_the_job_does_not_declare_is_refused.)"""
    slept: list[float] = []
    features = [Features(f"t{i}", 10.0, 0.0, 1, i + 1, "online") for i in range(4)]
    scores = RemoteScorer(SwappableFunction({"v1": score_v1}, "v1"), cost_ms=5.0,
                          sleep=slept.append)(features)
    assert slept == [pytest.approx(0.02)]
    assert scores == [score_v1(f) for f in features]
    assert all(0.0 <= s <= 1.0 for s in scores)
