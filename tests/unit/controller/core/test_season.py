"""A load that repeats: the period found, the peak forecast ahead, and the pattern set aside
when the load departs from it (`controller.core.season`)."""

from __future__ import annotations

import math
import random

from controller.core.season import Season, find_period
from controller.settings import SeasonSettings

HOUR_MS = 3_600_000
# A "day" of 4 hours at 5-minute buckets: 48 buckets per period.
SETTINGS = SeasonSettings(season_bucket_s=300, season_min_period_s=3600,
                          season_max_period_s=6 * 3600, season_lead_s=1800)
PERIOD_BUCKETS = 48


def daily(t_ms: int, noise: random.Random | None = None) -> float:
    """100/s at night to 500/s at the peak, a 4-hour day, ±10 % noise."""
    phase = (t_ms % (4 * HOUR_MS)) / (4 * HOUR_MS)
    rate = 300 - 200 * math.cos(2 * math.pi * phase)
    return rate * (1 + noise.gauss(0, 0.1)) if noise else rate


def fed(until_ms: int, rate=daily, every_ms: int = 10_000, seed: int = 3) -> Season:
    season, noise = Season("q1", SETTINGS), random.Random(seed)
    for t in range(0, until_ms, every_ms):
        season.observe(t, rate(t, noise))
    return season


def test_the_period_of_a_noisy_day_is_found_and_a_steady_load_has_none() -> None:
    season = fed(7 * HOUR_MS)  # 1.75 periods
    assert season.period == PERIOD_BUCKETS
    noise = random.Random(5)
    steady = [200 * (1 + noise.gauss(0, 0.1)) for _ in range(200)]
    assert find_period(steady, range(12, 73)) is None
    step = [100.0] * 100 + [400.0] * 100  # one change, never repeated
    assert find_period(step, range(12, 73)) is None
    rising = [100 + i * (1 + noise.gauss(0, 0.05)) for i in range(200)]  # a noisy trend
    assert find_period(rising, range(12, 73)) is None


def test_a_period_as_long_as_the_longest_allowed_is_found() -> None:
    season = Season("q1", SeasonSettings(season_bucket_s=300, season_min_period_s=3600,
                                         season_max_period_s=4 * 3600))
    noise = random.Random(3)
    for t in range(0, 7 * HOUR_MS, 10_000):
        season.observe(t, daily(t, noise))
    assert season.period == PERIOD_BUCKETS


def test_before_one_and_a_half_periods_nothing_is_forecast() -> None:
    assert fed(5 * HOUR_MS).forecast(1800) is None


def test_the_forecast_is_the_peak_of_the_lead_at_the_level_of_the_last_half_hour() -> None:
    # At 9 h the day is at phase 0.25 (300/s), rising to 0.375 (~441/s) in 30 minutes.
    season = fed(9 * HOUR_MS)
    forecast = season.forecast(1800)
    assert forecast is not None and forecast.period_s == 4 * 3600
    low, high = daily(9 * HOUR_MS + 1_500_000), daily(9 * HOUR_MS + 1_800_000)
    assert 0.9 * low <= forecast.peak <= 1.1 * high
    assert "repeats every 4 h" in forecast.describe()


def test_a_drift_raises_the_forecast_by_the_level_of_the_last_half_hour() -> None:
    def drifting(t_ms: int, noise: random.Random) -> float:  # 1.5× from 8 h on
        return daily(t_ms, noise) * (1.5 if t_ms >= 8 * HOUR_MS else 1.0)
    plain, drifted = fed(9 * HOUR_MS).forecast(1800), fed(9 * HOUR_MS, drifting).forecast(1800)
    assert plain is not None and drifted is not None
    assert 1.3 <= drifted.peak / plain.peak <= 1.7


def test_a_flash_crowd_seen_once_is_not_expected_again_two_periods_on() -> None:
    # A crowd at 1.5 h on the first day only (10× for 10 minutes).
    def crowd(t_ms: int, noise: random.Random) -> float:
        rush = 1.5 * HOUR_MS <= t_ms < 1.5 * HOUR_MS + 600_000
        return daily(t_ms, noise) * (10 if rush else 1)
    season = fed(9 * HOUR_MS + 1 * HOUR_MS, crowd)  # 10 h: the crowd's phase is 30 min ahead
    forecast = season.forecast(1800)
    assert forecast is not None and forecast.peak < 2 * daily(11 * HOUR_MS)


def test_a_load_that_departs_from_its_pattern_gets_no_forecast() -> None:
    def shifted(t_ms: int, noise: random.Random) -> float:  # half a day off from 8 h
        return daily(t_ms + (2 * HOUR_MS if t_ms >= 8 * HOUR_MS else 0), noise)
    assert fed(9 * HOUR_MS, shifted).forecast(1800) is None


def test_buckets_not_heard_from_are_gaps_not_zeros() -> None:
    season = Season("q1", SETTINGS)
    season.observe(0, 100.0)
    season.observe(3 * 300_000, 100.0)  # two buckets of silence
    assert list(season.closed) == [100.0, None, None]
