"""A load that repeats: each query's arrival rate remembered in buckets, the period it repeats
with, and the rate it will reach ahead (no I/O; the loop feeds it λ once per cycle).

Why: a reactive controller meets every morning's rise late — a step at a time, each paid for
with a restart and a backlog — and every evening's fall after a stabilisation period. A load
that repeats tells the controller ahead of time what it will need, so it can size once, by the
time a change takes to pay off, for the peak ahead.

How (Holt-Winters' seasonal index without its smoothing, and DS2's one step sizing of what
arrives): λ is averaged per bucket of `bucket_s`; once per shortest period allowed (an hour by
default) per query, staggered over the fleet, the period is searched among every whole number
of buckets between the shortest and longest period allowed, as the lag at which the series best
correlates with itself (Spearman's rank correlation, at a local peak of at least
`MIN_CORRELATION`; the best peak wins, unless a peak near its whole fraction scores about as
well: a multiple of the period). The forecast for a bucket ahead is the least of what the same
phase held one and two periods ago — a flash crowd seen once is not expected again — times the
level: how the last half of the shortest period compares with what the pattern said of it (a
slow drift). While the last shortest period departs from the pattern by more than the
tolerance, there is no forecast and the controller reacts. At the defaults, "the shortest
period" is an hour; a compressed day (a benchmark, a recorded trace) sets it shorter and every
window shrinks with it.

Work per query is O(1) per cycle (a running mean) and O(buckets × lags) once per period.
Neighbours: `loop.cycle` (feeds λ, puts the forecast on the model), `policy` (sizes for it).
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from controller.settings import SeasonSettings

MIN_CORRELATION = 0.8
"""The least correlation of the series with itself one period later that counts as a
repeating load: a diurnal shape with ±20 % noise scores above 0.9, a random walk or a single
step far lower once the lag reaches a period's length."""

NEAR_BEST = 0.05
"""A shorter period whose correlation is within this of the best one's is the period (the
best may be a multiple of it)."""

SMOOTHING = 3
"""Lags either side a lag's correlation is averaged with before peaks are looked for."""

HALF_PERIOD_DIP = 0.5
"""How much less the series must correlate with itself half a period on than a period on."""

MIN_VARIATION = 0.1
"""Coefficient of variation below which a load counts as steady: nothing to anticipate."""

RELEASE = 1.5
"""A forecast in use is set aside once the last check window departs from the pattern by this many
times the tolerance (taken up within the tolerance): a band, not a threshold."""

PHASE_SLACK = 2
"""Buckets either side whose expectation a bucket may meet (`fit_level`)."""

LEVEL_SHARE = 0.5
"""The drift of the level is read over this share of the check window's closed buckets."""


@dataclass(frozen=True, slots=True)
class Forecast:
    """The most the load is expected to reach within the lead, from its repeating pattern."""

    peak: float
    """records/s"""
    in_s: float
    """seconds from now to the bucket of the peak"""
    period_s: float
    error: float
    """how far the check window departed from the pattern (mean absolute error over mean rate)"""
    checked_s: float
    """the check window: the last `season_min_period_s`"""

    def describe(self) -> str:
        return (f"the load that repeats every {_duration(self.period_s)} reaches "
                f"{self.peak:,.0f}/s in {_duration(self.in_s)} (the last "
                f"{_duration(self.checked_s)} off the pattern by {self.error:.0%})")


class Season:
    """One query's arrival rate in buckets, its period and its forecast."""

    def __init__(self, query_id: str, settings: SeasonSettings) -> None:
        self.settings = settings
        self.bucket_ms = int(settings.season_bucket_s * 1000)
        keep = math.ceil(2.6 * settings.season_max_period_s / settings.season_bucket_s)
        self.closed: deque[float | None] = deque(maxlen=keep)
        """Mean λ of each closed bucket, oldest first; None where nothing was heard."""
        self.current: int | None = None
        """The index (ms // bucket_ms) of the bucket being filled."""
        self._sum, self._count = 0.0, 0
        self.period: int | None = None
        """Buckets per period, when the load repeats."""
        self._check = self._buckets(settings.season_min_period_s)
        """Buckets the pattern is checked against, and between two searches of the period."""
        self._search_every = self._check
        self._next_search: int | None = None
        """The first bucket at which the next search runs (searched when a bucket at or after
        it begins, so a silence over it delays the search instead of skipping it)."""
        self._stagger = zlib.crc32(query_id.encode()) % self._search_every
        self._level: float | None = None
        """How the newest closed buckets compare with the pattern (`fit_level`), refitted as
        each bucket closes; None while the pattern is set aside."""
        self._error = math.inf

    def observe(self, now_ms: int, rate: float) -> None:
        """λ now; closes the bucket (and the ones not heard from) when a new one begins."""
        bucket = now_ms // self.bucket_ms
        if self.current is not None and bucket > self.current:
            self.closed.append(self._sum / self._count if self._count else None)
            for _ in range(min(bucket - self.current - 1, self.closed.maxlen or 0)):
                self.closed.append(None)
            self._sum, self._count = 0.0, 0
            if self._next_search is not None and bucket >= self._next_search:
                self.period = find_period(list(self.closed), self._lags(), self.period)
                self._next_search = bucket + self._search_every
            self._refit()
        if self.current is None:  # the first search lands on the query's own stagger
            self._next_search = bucket + (self._stagger - bucket) % self._search_every
        if self.current is None or bucket > self.current:
            self.current = bucket
        self._sum += rate
        self._count += 1

    def forecast(self, now_ms: int, lead_s: float) -> Forecast | None:
        """The peak expected in the buckets that begin within `lead_s` of `now_ms` (the
        current one included), or None: no period found, or the check window departs from
        the pattern."""
        period, series, level = self.period, self.closed, self._level
        if period is None or level is None or self.current is None:
            return None
        last = (now_ms + round(lead_s * 1000)) // self.bucket_ms - self.current
        ahead = [(k, expected(series, period, k)) for k in range(max(0, last) + 1)]
        known = [(k, v) for k, v in ahead if v is not None]
        if not known:
            return None
        k, peak = max(known, key=lambda kv: kv[1])
        starts_ms = (self.current + k) * self.bucket_ms
        return Forecast(level * peak, max(0.0, (starts_ms - now_ms) / 1000),
                        period * self.settings.season_bucket_s, self._error,
                        self._check * self.settings.season_bucket_s)

    def _refit(self) -> None:
        """The level and error of the pattern once a bucket closed, and whether it is in use:
        taken up within `season_tolerance`, set aside only beyond `RELEASE` × it, so an error
        that hovers at the tolerance does not switch the forecast, and the size, on and off."""
        period, series = self.period, self.closed
        if period is None or len(series) < period:
            self._level, self._error = None, math.inf
            return
        level, self._error = fit_level(series, period,
                                       max(1, round(LEVEL_SHARE * self._check)), self._check)
        allowed = self.settings.season_tolerance * (RELEASE if self._level is not None else 1)
        self._level = level if level is not None and self._error <= allowed else None

    def _lags(self) -> range:
        """From the shortest period to a little past the longest: measured in buckets of a
        noisy load, a period of exactly a day peaks a bucket or two either side of it."""
        s = self.settings
        return range(max(2, round(s.season_min_period_s / s.season_bucket_s)),
                     round(1.02 * s.season_max_period_s / s.season_bucket_s) + 2)

    def _buckets(self, seconds: float) -> int:
        return max(1, round(seconds / self.settings.season_bucket_s))


def expected(series: Sequence[float | None], period: int, ahead: int) -> float | None:
    """What the pattern says of the bucket `ahead` buckets after the current one (0: the
    current, still filling)."""
    return expected_at(series, period, len(series) + ahead)


def expected_at(series: Sequence[float | None], period: int, position: int) -> float | None:
    """What the pattern says of the bucket at index `position` of `series` (past its end: one
    ahead): the least of the same phase one and two periods before, each the most of that
    bucket and its neighbours (a period measured a bucket off, a rise a bucket early)."""
    seen = [v for back in (period, 2 * period)
            if (v := _phase_high(series, position - back)) is not None]
    return min(seen) if seen else None


def _phase_high(series: Sequence[float | None], at: int) -> float | None:
    near = [v for i in (at - 1, at, at + 1)
            if 0 <= i < len(series) and (v := series[i]) is not None]
    return max(near) if near else None


def fit_level(series: Sequence[float | None], period: int, level_buckets: int,
              check_buckets: int) -> tuple[float | None, float]:
    """How the newest buckets compare with the pattern: the level (actual over expected over
    the last `level_buckets`, within ½–2×) and the error of the pattern times that level over
    the last `check_buckets` (mean absolute distance from what it allows over mean actual).

    What the pattern allows of a bucket is a band, the least and most it says of the buckets
    `PHASE_SLACK` either side: a day's rise that comes ten minutes later than yesterday's is
    the same day, not a departure (and a period measured a bucket short puts it there)."""
    bands = [(i, (series[i], _band(series, period, i)))
             for i in range(max(0, len(series) - check_buckets), len(series))]
    known = [(i, (a, band)) for i, (a, band) in bands if a is not None and band is not None]
    if len(known) < max(2, check_buckets // 2):
        return None, math.inf
    centred = [(a, expected_at(series, period, i)) for i, (a, _) in known[-level_buckets:]]
    recent = [(a, e) for a, e in centred if e is not None]
    said = sum(e for _, e in recent)
    level = min(2.0, max(0.5, sum(a for a, _ in recent) / said)) if said > 0 else 1.0
    actual = sum(a for _, (a, _) in known)
    if actual <= 0:
        return level, 0.0
    return level, sum(max(0.0, level * low - a, a - level * high)
                      for _, (a, (low, high)) in known) / actual


def _band(series: Sequence[float | None], period: int,
          position: int) -> tuple[float, float] | None:
    said = [v for d in range(-PHASE_SLACK, PHASE_SLACK + 1)
            if (v := expected_at(series, period, position + d)) is not None]
    return (min(said), max(said)) if said else None


def find_period(series: Sequence[float | None], lags: range,
                current: int | None = None) -> int | None:
    """The lag (in buckets) at which the series best correlates with itself, if it varies at
    all and the best reaches `MIN_CORRELATION`; only lags the series holds 1.5 periods of."""
    values = [v for v in series if v is not None]
    if len(values) < 3:
        return None
    mean = sum(values) / len(values)
    if mean <= 0 or _sd(values, mean) / mean < MIN_VARIATION:
        return None
    ranked = _ranks(series)  # Spearman's: one flash crowd does not outweigh a day's shape
    # The lags either side of the range are scored too, so that its ends can be peaks.
    raw = {lag: _correlation(ranked, lag)
           for lag in range(max(1, lags.start - 1 - SMOOTHING), lags.stop + 1 + SMOOTHING)
           if 1.5 * lag <= len(series)}
    scores = _smoothed(raw)
    peaks = [lag for lag, score in scores.items() if lag in lags and score is not None
             and score >= MIN_CORRELATION and _local_peak(scores, lag)
             and _dips_halfway(ranked, lag, score)]
    if not peaks:
        return None
    best = max(peaks, key=lambda lag: scores[lag] or 0.0)
    if current is not None and abs(best - current) <= 2:
        return current  # the period found before still holds: it does not wander by a bucket
    return _fraction_of(best, peaks, scores)


def _smoothed(raw: dict[int, float | None]) -> dict[int, float | None]:
    """Each lag's score as the mean over `SMOOTHING` lags either side (None unless all were
    scored): noise puts bumps on the broad top of a period's correlation, each a local peak
    a few buckets off the period, and at the longest lag scored an edge looks like a peak."""
    width = 2 * SMOOTHING + 1
    smoothed: dict[int, float | None] = {}
    for lag in raw:
        near = [raw.get(lag + d) for d in range(-SMOOTHING, SMOOTHING + 1)]
        known = [v for v in near if v is not None]
        smoothed[lag] = sum(known) / width if len(known) == width else None
    return smoothed


def _fraction_of(best: int, peaks: Sequence[int], scores: dict[int, float | None]) -> int:
    """The best peak, or the shortest peak it is a whole multiple of (within a bucket or two
    per period) that scores within `NEAR_BEST` of it: a load that repeats daily correlates
    with itself two days on about as well as one day on."""
    top = scores[best] or 0.0
    for lag in sorted(peaks):
        times = round(best / lag)
        if (lag < best and times >= 2 and abs(best - times * lag) <= 2 * times
                and (scores[lag] or 0.0) >= top - NEAR_BEST):
            return lag
    return best


def _dips_halfway(ranked: Sequence[float | None], lag: int, score: float) -> bool:
    """Half a period on, a repeating load is at the other side of its cycle: the series
    correlates with itself far less there. A trend or a slow wander correlates about as well
    at every short lag, and has no period."""
    half = _correlation(ranked, lag // 2)
    return half is None or half <= score - HALF_PERIOD_DIP


def _local_peak(scores: dict[int, float | None], lag: int) -> bool:
    """Higher than both neighbours, which must have been scored: a correlation that only
    falls with the lag (a trend, a single step) peaks at the edge, not at a period."""
    here, near = scores[lag], [scores.get(lag - 1), scores.get(lag + 1)]
    return here is not None and all(n is not None and n <= here for n in near)


def _correlation(series: Sequence[float | None], lag: int) -> float | None:
    pairs = [(a, b) for a, b in zip(series, series[lag:], strict=False)
             if a is not None and b is not None]
    if len(pairs) < max(3, lag // 2):
        return None
    n = len(pairs)
    mean_a = sum(a for a, _ in pairs) / n
    mean_b = sum(b for _, b in pairs) / n
    cov = sum((a - mean_a) * (b - mean_b) for a, b in pairs)
    var_a = sum((a - mean_a) ** 2 for a, _ in pairs)
    var_b = sum((b - mean_b) ** 2 for _, b in pairs)
    return cov / math.sqrt(var_a * var_b) if var_a > 0 and var_b > 0 else None


def _ranks(series: Sequence[float | None]) -> list[float | None]:
    """Each value's rank among the known ones, ties sharing their mean rank."""
    order = sorted((v, i) for i, v in enumerate(series) if v is not None)
    ranked: list[float | None] = [None] * len(series)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and order[end + 1][0] == order[start][0]:
            end += 1
        for _, i in order[start:end + 1]:
            ranked[i] = (start + end) / 2
        start = end + 1
    return ranked


def _sd(values: Sequence[float], mean: float) -> float:
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
