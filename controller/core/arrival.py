"""The arrival rate λ: a change-point-aware level of the input topics' growth.

Owns how the latest offsets the batches report become one rate: the per-interval growth
between consecutive samples (`intervals`), and the level of the current segment of those
intervals (`estimate`). Pure; `model.evaluate` calls it with a window's samples.

Why not one average over a fixed span: a micro-batch reports the latest offsets it saw when
it was planned, i.e. at its start, so the newest figure is one batch old, and a backlogged
batch lasts 10–20 s. A 10 s average that straddles a load step sizes the query for a mix of
the old and the new rate, and a second round follows; the newest interval alone sizes it for
whatever burst that interval caught. Instead the intervals are read as a piecewise-constant
rate with occasional level shifts:

- an interval within `level_shift_ratio` of the current level belongs to it;
- one beyond it starts a candidate shift (up or down); it is *confirmed* once
  `level_confirm_intervals` consecutive departing intervals agree with each other (within
  `level_agreement`), have shown the new level for `level_confirm_s` since the end of the
  interval the change happened in, and their level also departs from the mean of the whole
  window before them, or they have lasted `arrival_window_s` (after a burst that was a level
  for a while, say an upstream catching up, the window's mean still holds the burst, and a
  fall to a rate between the two would otherwise never be taken); the new segment is those
  agreeing intervals (the one that straddles the change is a mix of both levels and is left
  out unless it agrees, and a burst that is ending falls back and disagrees);
- a candidate that is not confirmed (a burst that ended, or is ending) is a transient: an
  interval that fits the old level again drops it. Its records are not lost: they are in the
  backlog, which the batches measure directly (`model.backlog_records`), so a spike is
  drained rather than sized for.

The level of a segment is its growth over its newest `arrival_window_s` (at least its newest
interval): one step is sized in one round, and a stationary noisy load is still averaged.
When records arrive in bursts coarser than the intervals (`bursty`: a reader of an upstream
micro-batch job's output), single intervals say nothing and λ is the plain mean over the
newest `arrival_window_s`, as before change points.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate, pairwise

from controller.core.memo import Memo
from controller.settings import ModelSettings
from schemas import SourcePartition, TaskMetrics

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Interval:
    """Records that reached the source partitions between two planning times (the end after
    the start)."""

    start_ms: int
    end_ms: int
    records: int
    rate: float = field(init=False, repr=False, compare=False)
    """Records/s; computed once, as every estimate over the window reads it again."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", self.records * 1000 / (self.end_ms - self.start_ms))


@dataclass(frozen=True, slots=True)
class ArrivalEstimate:
    rate: float
    """λ, records/s: the level of the current segment."""
    since_ms: int
    """Start of the current segment (a confirmed shift moves it)."""
    pending_rate: float | None = None
    """The newest interval's rate when it departs from the level without being confirmed
    yet (a step that must persist one more interval, or a burst that will not)."""
    ramp_per_s: float = 0.0
    """How fast the rate climbs, records/s per second, when the arrivals are a rising ramp
    (`ramp`); 0 otherwise."""


def known_offsets(sample: TaskMetrics) -> dict[PartitionKey, SourcePartition]:
    """Partitions whose latest offset the source knew (-1: first batch, empty partition)."""
    return {(p.topic, p.partition): p for p in sample.partitions if p.latest_offset >= 0}


def intervals(samples: Sequence[TaskMetrics], memo: Memo | None = None) -> list[Interval]:
    """Growth of Σ latest offset between consecutive samples, timed by their batch starts
    (when the source read the latest offsets: Spark plans a batch against them).

    Only partitions known in both samples of a pair count, and only pairs with such partitions
    make an interval, so a heartbeat without offsets or a partition that appears later does
    not fake a burst. A shrinking offset (topic recreated) counts as no growth. `memo` keeps
    each pair's interval while both samples stay in the window.
    """
    return [i for i in (memo or Memo()).pairs(_interval, samples) if i is not None]


def _interval(before: TaskMetrics, after: TaskMetrics) -> Interval | None:
    old, new = known_offsets(before), known_offsets(after)
    common = old.keys() & new.keys()
    if after.batch_start_ms <= before.batch_start_ms or not common:
        return None
    grown = sum(max(0, new[k].latest_offset - old[k].latest_offset) for k in common)
    return Interval(before.batch_start_ms, after.batch_start_ms, grown)


class Level:
    """The level of a segment that grows at its end: its growth rate over the intervals that
    start within `span_s` of its newest end (at least the newest interval), kept up to date
    per interval added. The intervals come oldest first, their starts and ends rising (as
    `arrival_intervals` makes them), so those within the span are a suffix: each interval
    joins the sums once and leaves them once, and a scan over a window of intervals costs
    O(window), not O(window²)."""

    def __init__(self, segment: Sequence[Interval], span_s: float) -> None:
        self.segment: list[Interval] = []
        self._span_ms = span_s * 1000
        self._oldest = 0
        """Index of the oldest interval within the span."""
        self._records = self._elapsed_ms = 0
        self.rate = 0.0
        """Records/s of the intervals within the span; set per interval added, as the scan
        compares every interval with it."""
        for interval in segment:
            self.append(interval)

    def append(self, interval: Interval) -> None:
        segment = self.segment
        segment.append(interval)
        self._records += interval.records
        self._elapsed_ms += interval.end_ms - interval.start_ms
        horizon = interval.end_ms - self._span_ms
        while self._oldest < len(segment) and segment[self._oldest].start_ms < horizon:
            left = segment[self._oldest]
            self._records -= left.records
            self._elapsed_ms -= left.end_ms - left.start_ms
            self._oldest += 1
        self.rate = (interval.rate if self._oldest == len(segment)
                     else self._records * 1000 / self._elapsed_ms)


def departure(rate: float, level_rate: float, ratio: float) -> int:
    """+1 when `rate` is beyond `ratio` × the level, -1 when below level / `ratio`, else 0."""
    if rate > level_rate * ratio:
        return 1
    if rate * ratio < level_rate:
        return -1
    return 0


def estimate(found: Sequence[Interval], settings: ModelSettings) -> ArrivalEstimate | None:
    """The current level and any unconfirmed departure from it (module docstring)."""
    if not found:
        return None
    if bursty(found, settings.level_shift_ratio):
        recent = [i for i in found if i.start_ms >= found[-1].end_ms
                  - settings.arrival_window_s * 1000]
        return ArrivalEstimate(mean_rate(recent if len(recent) >= BURSTY_AT_LEAST
                                         else found[-BURSTY_AT_LEAST:]), found[0].start_ms)
    segment = Level(found[:1], settings.arrival_window_s)
    before = _MeanRates(found)
    run: list[Interval] = []
    direction = 0
    ratio = settings.level_shift_ratio
    for index in range(1, len(found)):
        interval = found[index]
        way = departure(interval.rate, segment.rate, ratio)
        if way == 0:
            segment.append(interval)
            if run:
                run, direction = [], 0  # a candidate shift that did not last: a transient
            continue
        if way != direction:
            run, direction = [], way
        run.append(interval)
        tail = confirmed_tail(run, partial(before.of_first, index + 1 - len(run)), direction,
                              settings)
        if tail:
            segment, run, direction = Level(tail, settings.arrival_window_s), [], 0
    pending = run[-1].rate if run else None
    return ArrivalEstimate(segment.rate, segment.segment[0].start_ms, pending,
                           ramp(found, settings))


class _MeanRates:
    """`mean_rate` of any prefix of `found`, from running sums made on the first question
    (a steady load asks none): O(1) each."""

    def __init__(self, found: Sequence[Interval]) -> None:
        self._found = found
        self._sums: tuple[list[int], list[int]] | None = None

    def of_first(self, count: int) -> float:
        if self._sums is None:
            self._sums = (list(accumulate((i.records for i in self._found), initial=0)),
                          list(accumulate((i.end_ms - i.start_ms for i in self._found),
                                          initial=0)))
        records, elapsed_ms = self._sums
        return records[count] * 1000 / elapsed_ms[count]


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
    recent = [i for i in found if i.start_ms >= newest_end - window_s * 1000]
    shortest_ms = window_s * 500
    ratio = settings.level_shift_ratio
    may_rise = _may_rise(recent, ratio)
    fits = [fit for first in range(len(recent) - RAMP_AT_LEAST + 1)
            if newest_end - recent[first].start_ms >= shortest_ms and may_rise[first]
            and (fit := _ramp_fit(recent[first:], ratio)) is not None]
    return min(fits)[1] if fits else 0.0


_ROUNDING = 1e-6
"""Relative slack of `_may_rise`'s running sums: far above their rounding error, so a span it
rules out is one `_ramp_fit` would rule out too."""


def _may_rise(span: Sequence[Interval], shift_ratio: float) -> list[bool]:
    """For each start of a newest span of `span`: False when its line cannot rise by
    `shift_ratio` − 1 of its mean (`_ramp_fit`'s first test), from running sums over the
    suffixes, O(len(span)); a flat load then costs no fit at all (one fit per start is
    O(len(span)²))."""
    found = [False] * len(span)
    if not span:
        return found
    origin = (span[-1].start_ms + span[-1].end_ms) / 2000  # centred: sums of squares stay exact
    n = sx = sy = sxx = sxy = 0.0
    for first in range(len(span) - 1, -1, -1):
        interval = span[first]
        x, y = (interval.start_ms + interval.end_ms) / 2000 - origin, interval.rate
        n, sx, sy, sxx, sxy = n + 1, sx + x, sy + y, sxx + x * x, sxy + x * y
        spread = n * sxx - sx * sx
        if spread <= 0:
            found[first] = True
            continue
        rise = (n * sxy - sx * sy) / spread * -x
        needed = (shift_ratio - 1) * sy / n
        found[first] = rise >= needed - _ROUNDING * (abs(rise) + abs(needed) + 1)
    return found


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


BURSTY_AT_LEAST = 3
"""Intervals averaged at least when arrivals are bursty: more than one upstream batch."""


BURSTY_REVERSALS = 2
"""Jumps beyond `level_shift_ratio` straight back and forth (or intervals without growth) in
one window that make the arrivals bursty: one is a spike or a dip (the estimate's business),
repeated ones are the pattern."""


def bursty(found: Sequence[Interval], ratio: float) -> bool:
    """Whether records arrive in bursts coarser than the intervals. An upstream micro-batch
    job writes each batch's output at once, so a reader sees 0, 0, 2 000, 0, … or, with a
    trigger close to the upstream's batch period, 160, 57, 160, 57/s: single intervals are
    then no rate observations, and only their mean over `arrival_window_s` is."""
    empty = sum(1 for i in found if i.records == 0)
    if empty >= BURSTY_REVERSALS and empty < len(found):
        return True
    rates = [i.rate for i in found]
    ways = [departure(b, a, ratio) for a, b in pairwise(rates)]
    reversals = sum(1 for way, then in pairwise(ways)
                    if way != 0 and then == -way)
    return reversals >= BURSTY_REVERSALS


def confirmed_tail(run: Sequence[Interval], history_rate: Callable[[], float], direction: int,
                   settings: ModelSettings) -> list[Interval]:
    """The new segment when `run` confirms a shift, else [] (module docstring).
    `history_rate()`: the `mean_rate` of the window's intervals before the run.

    Confirmed: at least `level_confirm_intervals` of its newest intervals agree with each
    other (a burst that is ending falls back and disagrees) and have lasted `level_confirm_s`
    at the new level (`new_level_lasted_ms`), and their level departs, the same way, from the
    mean of everything before the run in the window too, not only from the current segment: a
    stationary noisy load swings between its extremes, but around its mean. Agreeing
    intervals that span `arrival_window_s` are the level whatever that mean says: λ is the
    growth over that span, and none of it is at the old level.
    """
    tail = agreeing_tail(run, settings.level_agreement)
    if (len(tail) < settings.level_confirm_intervals
            or new_level_lasted_ms(run, tail) < settings.level_confirm_s * 1000):
        return []
    if tail[-1].end_ms - tail[0].start_ms >= settings.arrival_window_s * 1000:
        return tail
    shifted = departure(mean_rate(tail), history_rate(), settings.level_shift_ratio)
    return tail if shifted == direction else []


def new_level_lasted_ms(run: Sequence[Interval], tail: Sequence[Interval]) -> int:
    """How long the agreeing `tail` shows the new level for certain: from the end of the run's
    first interval, in which the change happened somewhere (its rate is a mix that may still
    agree when the change came early in it), or from the tail's start if later. Counted from
    the tail's start, a spike as long as `level_confirm_s` that began just after a probe was
    confirmed (and sized for) as it ended, in about two runs in five (bench.reaction)."""
    return tail[-1].end_ms - max(tail[0].start_ms, run[0].end_ms)


def mean_rate(found: Sequence[Interval]) -> float:
    elapsed = sum(i.end_ms - i.start_ms for i in found)
    return sum(i.records for i in found) * 1000 / elapsed


def agreeing_tail(run: Sequence[Interval], agreement: float) -> list[Interval]:
    """The newest intervals of `run` whose rates agree with the newest one's."""
    newest = run[-1].rate
    tail = [run[-1]]
    for interval in reversed(run[:-1]):
        if abs(interval.rate - newest) > agreement * max(interval.rate, newest):
            break
        tail.insert(0, interval)
    return tail
