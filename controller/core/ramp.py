"""The rising ramp in the arrivals: its slope, when a line fits the newest intervals far better
than any step does.

Owns `ramp`. Pure; `arrival.Scan` calls it with a window's intervals. Why: a load that climbs
for minutes (a morning's rise) is under-sized by a level, which says where the load is, not
where it will be when a change pays off; the policy sizes ahead along the slope
(`PolicySettings.ramp_horizon_s`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from itertools import accumulate, repeat
from operator import add, attrgetter, ge, mul, neg, sub, truediv
from typing import TYPE_CHECKING

from controller.settings import ModelSettings

if TYPE_CHECKING:  # arrival imports this module; an interval is only read here
    from controller.core.arrival import Interval

RAMP_AT_LEAST = 6
"""Intervals a ramp is fitted on at least: fewer fit a line or a step equally well."""

RAMP_LINE_ADVANTAGE = 2.0
"""A line must leave at most half the squared error of the best single step to be a ramp."""


def ramp(found: Sequence[Interval], settings: ModelSettings) -> float:
    """The slope of a rising ramp, records/s per second, or 0. Every newest span of at least
    half of `ramp_window_s` (and at most all of it, within the model's window) that is a ramp
    (`_ramp_fit`) is a candidate, and the one the line fits best (least mean squared error)
    gives the slope: a ramp is seen from its first `ramp_window_s` / 2 even when the window
    still holds the flat load before it, which would flatten a line through both. Falling
    arrivals give 0: a scale-down waits for the lower level anyway."""
    if not found:
        return 0.0
    newest_end, window_s = found[-1].end_ms, min(settings.ramp_window_s, settings.window_s)
    # The intervals' starts rise (`arrival.intervals`): the spans are found by bisection.
    recent = found[bisect_left(found, newest_end - window_s * 1000, key=attrgetter("start_ms")):]
    # Candidates span at least half the ramp window: newest_end − start ≥ window_s × 500,
    # compared as an integer against a float, as the scan over every start did.
    long_enough = bisect_right(recent, -window_s * 500,
                               key=lambda interval: interval.start_ms - newest_end)
    ratio = settings.level_shift_ratio
    may_rise = _may_rise(recent, ratio, long_enough)
    fits = [fit for first in range(min(long_enough, len(recent) - RAMP_AT_LEAST + 1))
            if may_rise[first] and (fit := _ramp_fit(recent[first:], ratio)) is not None]
    return min(fits)[1] if fits else 0.0


_ROUNDING = 1e-6
"""Relative slack of `_may_rise`'s running sums: far above their rounding error, so a span it
rules out is one `_ramp_fit` would rule out too."""


def _may_rise(span: Sequence[Interval], shift_ratio: float,
              starts: int | None = None) -> list[bool]:
    """For each of the first `starts` starts (all by default) of a newest span of `span`:
    False when its line cannot rise by `shift_ratio` − 1 of its mean (`_ramp_fit`'s first
    test), from running sums over the suffixes, O(len(span)); a flat load then costs no fit
    at all (one fit per start is O(len(span)²))."""
    size = len(span)
    tested = size if starts is None else max(0, min(starts, size))
    untested = [False] * (size - tested)
    if not span:
        return untested
    origin = (span[-1].start_ms + span[-1].end_ms) / 2000  # centred: sums of squares stay exact
    xs = [(interval.start_ms + interval.end_ms) / 2000 - origin for interval in span]
    ys = [interval.rate for interval in span]
    # Sums over each suffix, newest first, added in the order a loop from the newest would
    # (the same floats), in C, as the tests below.
    sx, sy = _suffix_sums(xs)[:tested], _suffix_sums(ys)[:tested]
    sxx = _suffix_sums(list(map(mul, xs, xs)))[:tested]
    sxy = _suffix_sums(list(map(mul, xs, ys)))[:tested]
    ns = list(map(float, range(size, size - tested, -1)))  # n = size − first, per start
    spreads = list(map(sub, map(mul, ns, sxx), map(mul, sx, sx)))
    if any(spread <= 0 for spread in spreads):  # a start with no spread always may rise
        return _may_rise_each(xs, ns, sx, sy, sxx, sxy, spreads, shift_ratio) + untested
    # Each start's test below, as `_may_rise_each` spells it, the same operations in the
    # same order (the same floats), in C: a window's forty-odd starts every cycle.
    rises = list(map(mul, map(truediv, map(sub, map(mul, ns, sxy), map(mul, sx, sy)),
                              spreads), map(neg, xs)))
    needed = list(map(truediv, map(mul, repeat(shift_ratio - 1), sy), ns))
    slack = map(mul, repeat(_ROUNDING),
                map(add, map(add, map(abs, rises), map(abs, needed)), repeat(1)))
    return list(map(ge, rises, map(sub, needed, slack))) + untested


def _may_rise_each(xs: Sequence[float], ns: Sequence[float], sx: Sequence[float],
                   sy: Sequence[float], sxx: Sequence[float], sxy: Sequence[float],
                   spreads: Sequence[float], shift_ratio: float) -> list[bool]:
    """`_may_rise`'s test of each start, one at a time."""
    found = []
    for first, spread in enumerate(spreads):
        if spread <= 0:
            found.append(True)
            continue
        n = ns[first]
        rise = (n * sxy[first] - sx[first] * sy[first]) / spread * -xs[first]
        needed = (shift_ratio - 1) * sy[first] / n
        found.append(rise >= needed - _ROUNDING * (abs(rise) + abs(needed) + 1))
    return found


def _suffix_sums(values: list[float]) -> list[float]:
    """Σ values[i:] for each i, summed from the last value back (0.0 + the last first)."""
    sums = list(accumulate(reversed(values), initial=0.0))[1:]
    sums.reverse()
    return sums


def _ramp_fit(span: Sequence[Interval], shift_ratio: float) -> tuple[float, float] | None:
    """(mean squared error, slope) of the line through the intervals' rates (least squares
    over their midpoints) when they are a ramp: the line rises, by at least `shift_ratio` − 1
    of their mean (a slow drift is none), and leaves at most 1/`RAMP_LINE_ADVANTAGE` of the
    squared error of the best single step (two levels split anywhere), so a step, a spike or
    noise is none either. Else None."""
    xs = [(i.start_ms + i.end_ms) / 2000 for i in span]
    ys = [i.rate for i in span]
    slope, intercept = _line(xs, ys)
    if slope <= 0 or slope * (xs[-1] - xs[0]) < (shift_ratio - 1) * sum(ys) / len(ys):
        return None
    line_error = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    if line_error * RAMP_LINE_ADVANTAGE > _best_step_error(ys):
        return None
    return line_error / len(ys), slope


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and intercept (xs not all equal)."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var
    return slope, mean_y - slope * mean_x


def _best_step_error(ys: Sequence[float]) -> float:
    """Least squared error of two levels, each over at least two of `ys`, split anywhere
    (prefix sums: linear in len(ys))."""
    sums, squares = [0.0], [0.0]
    for y in ys:
        sums.append(sums[-1] + y)
        squares.append(squares[-1] + y * y)

    def error(lo: int, hi: int) -> float:
        total = sums[hi] - sums[lo]
        return squares[hi] - squares[lo] - total * total / (hi - lo)

    n = len(ys)
    return min(error(0, k) + error(k, n) for k in range(2, n - 1))
