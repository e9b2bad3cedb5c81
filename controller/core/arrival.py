"""The arrival rate λ: a change-point-aware level of the input topics' growth.

Owns how the latest offsets the batches report become one rate: the per-interval growth
between consecutive samples (`intervals`), and the level of the current segment of those
intervals (`estimate`). Pure but for `Scan`, which carries the scan of one query's window from
cycle to cycle; `model.evaluate` calls it with a window's samples.

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
  out unless it agrees, and a burst that is ending falls back and disagrees); departing
  intervals that have lasted `arrival_window_s` and longer than the segment they depart from
  are the new segment even when they disagree (`outlasting`: the level was the burst);
- a candidate that is not confirmed (a burst that ended, or is ending) is a transient: an
  interval that fits the old level again drops it. Its records are not lost: they are in the
  backlog, which the batches measure directly (`model.backlog_records`), so a spike is
  drained rather than sized for. A dip whose end makes up for it (together they agree with
  the level within `level_agreement`) joins the level: the records a batch planned early
  missed come in the next one, which would otherwise count without the lull that balances
  it (350/s, then 850/s, is 600/s over the two).

The level of a segment is its growth over its newest `arrival_window_s` (at least its newest
interval): one step is sized in one round, and a stationary noisy load is still averaged.
When records arrive in bursts coarser than the intervals (`bursty`: a reader of an upstream
micro-batch job's output; jumps straight back, or gaps without growth, repeated in the window),
single intervals say nothing and λ is the plain mean over the whole window: over
`arrival_window_s` a burst more or less moves it by half. Such a λ takes the window to follow
a step; an upstream's resizing is projected to its readers meanwhile
(`topology`), and a reader's own backlog shows the rest.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from operator import attrgetter, sub

from controller.core.memo import Memo
from controller.core.ramp import ramp
from controller.settings import ModelSettings
from schemas import TaskMetrics

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
    pending_rate: float | None = None
    """The newest interval's rate when it departs from the level without being confirmed
    yet (a step that must persist one more interval, or a burst that will not)."""
    ramp_per_s: float = 0.0
    """How fast the rate climbs, records/s per second, when the arrivals are a rising ramp
    (`ramp`); 0 otherwise."""


@dataclass(frozen=True, slots=True)
class Latest:
    """What a sample says of its sources' latest offsets: the partitions whose latest offset
    the source knew (-1: first batch, empty partition), in the order the sample lists them,
    with those offsets, and when it read them (its batch's start). Worked out once per sample
    and use (`Memo.each`): the pairs of a window compare it in C, not partition by partition."""

    start_ms: int
    keys: tuple[PartitionKey, ...]
    offsets: tuple[int, ...]
    distinct: bool
    """Whether no partition is listed twice (then a pair with the same keys lines up)."""

    def by_key(self) -> dict[PartitionKey, int]:
        return dict(zip(self.keys, self.offsets, strict=True))

    def lines_up(self, before: Latest) -> bool:
        """Whether `before` names the same partitions in the same order."""
        return self.distinct and self.keys == before.keys


def latest(sample: TaskMetrics) -> Latest:
    known = [p for p in sample.partitions if p.latest_offset >= 0]
    keys = tuple((p.topic, p.partition) for p in known)
    return Latest(sample.batch_start_ms, keys, tuple(p.latest_offset for p in known),
                  len(set(keys)) == len(keys))


def steps(before: Latest, after: Latest) -> list[int]:
    """Each partition's growth from `before` to `after`, which line up (`Latest.lines_up`)."""
    return list(map(sub, after.offsets, before.offsets))


def intervals(samples: Sequence[TaskMetrics], memo: Memo | None = None) -> list[Interval]:
    """Growth of Σ latest offset between consecutive samples, timed by their batch starts
    (when the source read the latest offsets: Spark plans a batch against them).

    Only partitions known in both samples of a pair count, and only pairs with such partitions
    make an interval, so a heartbeat without offsets or a partition that appears later does
    not fake a burst. A shrinking offset (topic recreated) counts as no growth. `memo` keeps
    each sample's offsets and each pair's interval while they stay in the window.
    """
    memo = memo or Memo()
    return [i for i in memo.pairs(_interval, memo.each(latest, samples)) if i is not None]


def _interval(before: Latest, after: Latest) -> Interval | None:
    if after.start_ms <= before.start_ms:
        return None
    if after.lines_up(before):
        if not after.keys:
            return None
        grown = steps(before, after)
        records = sum(grown) if min(grown) >= 0 else sum(s for s in grown if s > 0)
    else:
        old, new = before.by_key(), after.by_key()
        common = old.keys() & new.keys()
        if not common:
            return None
        records = sum(max(0, new[k] - old[k]) for k in common)
    return Interval(before.start_ms, after.start_ms, records)


class Level:
    """The level of a segment that grows at its end: its growth rate over the intervals that
    start within `span_s` of its newest end (at least the newest interval), kept up to date
    per interval added. The intervals come oldest first, their starts and ends rising (as
    `arrival_intervals` makes them), so those within the span are a suffix: each interval
    joins the sums once and leaves them once, and a scan over a window of intervals costs
    O(window), not O(window²)."""

    def __init__(self, segment: Sequence[Interval], span_s: float) -> None:
        self.from_ms = segment[0].start_ms
        """When the segment began (its first interval's start; `outlasting`)."""
        self._inside: deque[Interval] = deque()
        """The intervals within the span (older ones are never read again)."""
        self._span_ms = span_s * 1000
        self._records = self._elapsed_ms = 0
        self.rate = 0.0
        """Records/s of the intervals within the span; set per interval added, as the scan
        compares every interval with it."""
        for interval in segment:
            self.append(interval)

    def append(self, interval: Interval) -> None:
        inside = self._inside
        inside.append(interval)
        self._records += interval.records
        self._elapsed_ms += interval.end_ms - interval.start_ms
        horizon = interval.end_ms - self._span_ms
        while inside and inside[0].start_ms < horizon:
            left = inside.popleft()
            self._records -= left.records
            self._elapsed_ms -= left.end_ms - left.start_ms
        self.rate = interval.rate if not inside else self._records * 1000 / self._elapsed_ms


def departure(rate: float, level_rate: float, ratio: float) -> int:
    """+1 when `rate` is beyond `ratio` × the level, -1 when below level / `ratio`, else 0."""
    if rate > level_rate * ratio:
        return 1
    if rate * ratio < level_rate:
        return -1
    return 0


def estimate(found: Sequence[Interval], settings: ModelSettings) -> ArrivalEstimate | None:
    """The current level and any unconfirmed departure from it (module docstring), scanned
    from the first of `found`."""
    return Scan(settings).estimate(found)


class Scan:
    """`estimate` carried from one cycle to the next, so each interval is scanned once.

    A window slides: each cycle a probe's interval joins at the back and old ones leave at the
    front. Scanned afresh each cycle, the level restarts at the window's first interval, and a
    window of a minute of probes cost most of the model's CPU per query. Carried, the scan
    reads only the intervals that joined; what the window's front still decides is read from
    running sums over the window: the mean of the intervals before a candidate shift
    (`confirmed_tail`'s history), the counts that make arrivals `bursty` and their λ then.
    The window may begin with an interval or two the scan never read (the batches' ones before
    the first probe, `model.arrival_intervals`): they count in those sums, not in the level.

    The estimate then differs from a fresh scan's only in where its level began: before the
    window's front rather than at it. A window that does not continue what was scanned (an
    interval changed, or the probes took over from the batches), and one that a candidate
    shift fills, are scanned afresh.
    """

    _COMPACT_AT = 512
    """Intervals left behind the window before the running lists are cut back."""

    def __init__(self, settings: ModelSettings) -> None:
        self._settings = settings
        self._restart()

    def _restart(self) -> None:
        self._seen: list[Interval] = []
        """The intervals scanned, oldest first; the window holds those from `_front` on."""
        self._front = 0
        self._records = [0]
        """Σ records of the first i intervals of `_seen`, for each i (with `_elapsed_ms`: the
        mean rate of any span of them in O(1), exactly as summed afresh)."""
        self._elapsed_ms = [0]
        self._gaps_begun = [0]
        """How many of the first i intervals saw no growth after one that did (`bursty`)."""
        self._gaps_ended = [0]
        """How many of the first i intervals saw growth after one that did not."""
        self._reversals = [0]
        """How many of the triples ending before index i jump straight back (`bursty`)."""
        self._way = 0
        """`departure` of the newest interval's rate from the one before it."""
        self._unread = _Unread()
        """The window's intervals before `_front` that the scan did not read."""
        self._level: Level | None = None
        self._run: list[Interval] = []
        """Consecutive intervals departing the same way from the level: a candidate shift."""
        self._direction = 0

    def estimate(self, found: Sequence[Interval]) -> ArrivalEstimate | None:
        """The estimate over `found`, the window's intervals oldest first (module docstring)."""
        if not found:
            self._restart()
            return None
        for interval in self._joined(found):
            self._step(interval)
        return self._result(found)

    def _joined(self, found: Sequence[Interval]) -> Sequence[Interval]:
        """The intervals of `found` not scanned yet; all of them, scanned afresh, when `found`
        does not continue what was scanned."""
        carried = self._carried(found)
        if carried is None:
            self._restart()
            return found
        front, unread, newest = carried
        # A candidate shift that began at or before the oldest scanned interval in the window
        # would be judged against no history the scan read: the window is read afresh, as its
        # own level. So is one with more unread intervals than the batches' one or two before
        # the first probe: intervals the scan read were replaced (an out-of-order sample).
        if unread > _UNREAD_AT_MOST or (self._run
                                        and len(self._seen) - len(self._run) <= front):
            self._restart()
            return found
        self._front = front
        self._unread = _Unread.of(found[:unread + 2], unread, self._settings.level_shift_ratio)
        if front >= self._COMPACT_AT and front * 2 >= len(self._seen):
            self._compact()
        return found[newest + 1:]

    def _carried(self, found: Sequence[Interval]) -> tuple[int, int, int] | None:
        """Where what was scanned lies in `found`: the index in `_seen` from which on the
        scanned intervals are in it, how many of `found` come before them (intervals never
        scanned), and the index in `found` of the newest scanned. None: `found` does not
        hold the scanned intervals in order up to the newest."""
        seen = self._seen
        if not seen:
            return None
        newest = bisect_left(found, seen[-1].start_ms, key=_START_MS)
        if newest == len(found) or found[newest] != seen[-1]:
            return None
        # The oldest interval of `found` that is the scanned one aligned with it: a binary
        # search, as intervals the scan never read may come first (the batches' ones).
        offset = len(seen) - 1 - newest
        low, high = max(0, self._front - offset), newest
        while low < high:
            middle = (low + high) // 2
            if seen[offset + middle] == found[middle]:
                high = middle
            else:
                low = middle + 1
        front = offset + low
        return (front, low, newest) if seen[front:] == list(found[low:newest + 1]) else None

    def _compact(self) -> None:
        front = self._front
        self._seen = self._seen[front:]
        self._records, self._elapsed_ms = self._records[front:], self._elapsed_ms[front:]
        self._gaps_begun, self._gaps_ended = self._gaps_begun[front:], self._gaps_ended[front:]
        self._reversals = self._reversals[front:]
        self._front = 0

    def _step(self, interval: Interval) -> None:
        ratio = self._settings.level_shift_ratio
        seen = self._seen
        jump = departure(interval.rate, seen[-1].rate, ratio) if seen else 0
        reversal = self._way != 0 and jump == -self._way
        self._way = jump
        seen.append(interval)
        self._records.append(self._records[-1] + interval.records)
        self._elapsed_ms.append(self._elapsed_ms[-1] + interval.end_ms - interval.start_ms)
        begun, ended = gap_edge(seen[-2], interval) if len(seen) > 1 else (False, False)
        self._gaps_begun.append(self._gaps_begun[-1] + begun)
        self._gaps_ended.append(self._gaps_ended[-1] + ended)
        self._reversals.append(self._reversals[-1] + reversal)
        level = self._level
        if level is None:
            self._level = Level((interval,), self._settings.arrival_window_s)
            return
        way = departure(interval.rate, level.rate, ratio)
        if way == 0:
            if self._run:  # a shift that did not last: a transient
                if self._direction < 0 and _balanced(self._run, interval, level.rate,
                                                     self._settings.level_agreement):
                    for dipped in self._run:  # a dip the interval made up for: its records
                        level.append(dipped)
                self._run, self._direction = [], 0
            level.append(interval)
            return
        if way != self._direction:
            self._run, self._direction = [], way
        self._run.append(interval)
        tail = (confirmed_tail(self._run, self._history_rate, way, self._settings)
                or outlasting(self._run, level.from_ms, self._settings))
        if tail:
            self._level = Level(tail, self._settings.arrival_window_s)
            self._run, self._direction = [], 0

    def _history_rate(self) -> float:
        """The mean rate of the window's intervals before the candidate shift (it begins after
        the window's front: `_joined`)."""
        return self._rate_before(len(self._seen) - len(self._run))

    def _rate_before(self, end: int) -> float:
        """The mean rate of the window's intervals before `_seen[end]`, from the running sums.
        Bursty arrivals are the whole window's (`_rate_before(len(_seen))`), not the newest
        `arrival_window_s`: an upstream writing every 5 s puts a burst or two into 10 s,
        λ ± 50 %, and one more or less into a minute, ± 8 %."""
        front, unread = self._front, self._unread
        return ((unread.records + self._records[end] - self._records[front]) * 1000
                / (unread.elapsed_ms + self._elapsed_ms[end] - self._elapsed_ms[front]))

    @property
    def bursty(self) -> bool:
        """Whether records arrive in bursts coarser than the intervals, in the window last shown,
        from the running counts. An upstream micro-batch job writes each batch's output at once,
        so a reader sees 0, 0, 2 000, 0, … or, with a trigger close to the upstream's batch
        period, 160, 57, 160, 57/s: single intervals are then no rate observations, and only
        their mean over the window is. Gaps count only when they repeat, begun and ended twice:
        a source that stops, or starts after an idle spell, has one gap, and a burst with the
        idle drain after it and a steady load after that (a calibration) has one begun."""
        front, unread = self._front, self._unread
        pairs_from = min(len(self._seen), front + 1)
        begun = unread.gaps_begun + self._gaps_begun[-1] - self._gaps_begun[pairs_from]
        ended = unread.gaps_ended + self._gaps_ended[-1] - self._gaps_ended[pairs_from]
        if begun >= BURSTY_REVERSALS and ended >= BURSTY_REVERSALS:
            return True
        triples_from = min(len(self._seen), front + 2)
        reversals = unread.reversals + self._reversals[-1] - self._reversals[triples_from]
        return reversals >= BURSTY_REVERSALS

    def _result(self, found: Sequence[Interval]) -> ArrivalEstimate:
        assert self._level is not None  # found is not empty: its first interval set one
        if self.bursty:
            return ArrivalEstimate(self._rate_before(len(self._seen)))
        pending = self._run[-1].rate if self._run else None
        return ArrivalEstimate(self._level.rate, pending, ramp(found, self._settings))


_START_MS = attrgetter("start_ms")


_UNREAD_AT_MOST = 2
"""Intervals at the window's front a carried scan counts without reading: the batches' one or
two before the first probe (`model.arrival_intervals`)."""


@dataclass(frozen=True, slots=True)
class _Unread:
    """The sums `Scan` keeps, over the window's intervals before those it scanned."""

    count: int = 0
    records: int = 0
    elapsed_ms: int = 0
    gaps_begun: int = 0
    """Gaps begun by the pairs of intervals that begin among them (`gap_edge`)."""
    gaps_ended: int = 0
    reversals: int = 0
    """Reversals of the triples that begin among them."""

    @staticmethod
    def of(head: Sequence[Interval], count: int, ratio: float) -> _Unread:
        """The sums over the first `count` of `head` (which holds the two after them too)."""
        if count == 0:
            return _Unread()
        unread = head[:count]
        ways = [departure(b.rate, a.rate, ratio) for a, b in pairwise(head)]
        edges = [gap_edge(a, b) for a, b in pairwise(head[:count + 1])]
        return _Unread(count, sum(i.records for i in unread),
                       sum(i.end_ms - i.start_ms for i in unread),
                       sum(begun for begun, _ in edges), sum(ended for _, ended in edges),
                       sum(1 for way, then in pairwise(ways[:count + 1])
                           if way != 0 and then == -way))


def gap_edge(before: Interval, interval: Interval) -> tuple[bool, bool]:
    """Whether `interval` begins a gap (no growth after growth), and whether it ends one."""
    return (before.records > 0 and interval.records == 0,
            before.records == 0 and interval.records > 0)


BURSTY_REVERSALS = 2
"""Jumps beyond `level_shift_ratio` straight back and forth (or gaps without growth, begun and
ended) in one window that make the arrivals bursty: one is a spike, a dip, a stop or a start
(the estimate's business), repeated ones are the pattern."""


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


def outlasting(run: Sequence[Interval], level_from_ms: int,
               settings: ModelSettings) -> list[Interval]:
    """`run` as the new segment when it has lasted `arrival_window_s` and longer than the
    segment it departs from (which began at `level_from_ms`), agreeing or not; else [].
    The level is what has lasted: a window that begins in a burst (the first interval of a
    query restarted beside an upstream that catches up holds that upstream's whole catch-up
    batch) makes the burst its level, and the rates after it, falling as the upstream catches
    up, disagree with each other and never confirm a shift; a shorter departure from a level
    that held longer stays a transient. A scan begun afresh (`Scan._joined`) starts its level
    at the window's first interval: the level's age is then cut to the window, and a departure
    that lasts longer than the rest of the window becomes the level sooner than it would."""
    lasted_ms = run[-1].end_ms - run[0].start_ms
    if (lasted_ms < settings.arrival_window_s * 1000
            or lasted_ms <= run[0].start_ms - level_from_ms):
        return []
    return list(run)


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


def _balanced(dip: Sequence[Interval], after: Interval, level_rate: float,
              agreement: float) -> bool:
    """Whether `after` brought what `dip` lacked: together they agree with the level (within
    `agreement` of the larger), as a batch planned early and the one after it do."""
    rate = mean_rate([*dip, after])
    return abs(rate - level_rate) <= agreement * max(rate, level_rate)


def agreeing_tail(run: Sequence[Interval], agreement: float) -> list[Interval]:
    """The newest intervals of `run` whose rates agree with the newest one's."""
    newest = run[-1].rate
    tail = [run[-1]]
    for interval in reversed(run[:-1]):
        if abs(interval.rate - newest) > agreement * max(interval.rate, newest):
            break
        tail.insert(0, interval)
    return tail
