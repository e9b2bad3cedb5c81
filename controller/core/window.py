"""Sliding windows of `TaskMetrics` samples, one per query.

Owns which samples the model may look at: the recent ones (by time and by count), each once,
and only those of the configuration in force; which of them are a run's warm-up batch; and
when the query was last heard from (batches, idle heartbeats and liveness beats alike; a beat
is never a sample). Pure and deterministic: `now_ms` comes from the caller
(`controller.loop.cycle`), nothing is logged; `model` reads `QueryWindow.samples` and `warm_up`.

Warm-up: the first batch with rows of an (instance, epoch) — the first of a (re)started run —
carries Spark's start-up (code generation, connections, state store loading): 196 rows took
6.4 s on the laptop where 240 take 2 s. It stays in the window for arrival and backlog (its
offsets are true) but must not count as a rate sample. A controller that starts while a run is
already going marks that run's first batch it sees too; losing one sample is harmless.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from enum import StrEnum
from itertools import pairwise

from controller.settings import ModelSettings
from schemas import Role, TaskMetrics

KEEP_NEWEST = 3
"""Samples a reporting query's window keeps however old: a least-squares trend needs three
(`model.MIN_TREND_SAMPLES`)."""


class Admission(StrEnum):
    """What happened to one offered sample."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    STALE_EPOCH = "stale_epoch"
    STANDBY = "standby"
    BEAT = "beat"


def sample_key(sample: TaskMetrics) -> tuple[str, int, int]:
    """Identifies a sample: (instance, batch id, end time for heartbeats else 0)."""
    # Idle heartbeats all carry batch_id -1, so their end time tells them apart; real
    # batches are identified by instance and batch id alone (a replayed record is a duplicate).
    stamp = sample.batch_end_ms if sample.batch_id < 0 else 0
    return (sample.instance_id, sample.batch_id, stamp)


class QueryWindow:
    """Recent samples of one query, ordered by batch start."""

    def __init__(self, query_id: str, *, window_s: float, max_samples: int) -> None:
        self.query_id = query_id
        self._window_ms = int(window_s * 1000)
        self._samples: deque[TaskMetrics] = deque(maxlen=max_samples)
        self._keys: set[tuple[str, int, int]] = set()
        self.epoch = 0
        """Newest configuration epoch seen (or required); older samples are ignored."""
        self.changed = False
        """Whether the epoch moved after the first sample: a change took effect, so a short
        window means "stabilising after a change" rather than "just started"."""
        self.last_seen_ms: int | None = None
        """End of the newest sample or beat ever accepted (kept through pruning and epoch
        changes)."""
        self.last_instance = ""
        """The instance of the newest sample accepted (the one active as far as known)."""
        self.last_sample: TaskMetrics | None = None
        """The newest sample accepted (kept through pruning and epoch changes): its trigger
        interval and batch time say how long the query may stay silent while a batch planned
        under an older epoch still runs (an executor request does not restart it)."""
        self._last_beat: TaskMetrics | None = None
        self.beat_heard_ms = 0
        """When the controller read the newest beat, on its own clock: beats are judged by
        their arrival, so a job's clock running ahead or behind (another machine) does not
        shorten or stretch their timeout."""
        self._carried: set[int] = set()
        """Epochs whose change leaves every sample valid (`carry_to`)."""
        self._started: set[tuple[str, int]] = set()
        self._warm_up: set[tuple[str, int, int]] = set()
        self._joined = False
        """Whether a sample joined since the last `prune`."""
        self._ends_in_order = True
        """Whether the samples' batch ends rise with their starts, so the oldest end first."""

    @property
    def samples(self) -> tuple[TaskMetrics, ...]:
        return tuple(self._samples)

    @property
    def warm_up(self) -> frozenset[tuple[str, int, int]]:
        """Keys (see `sample_key`) of the samples in the window that are a run's first batch."""
        return frozenset(self._warm_up & self._keys)

    def add(self, sample: TaskMetrics, heard_at_ms: int | None = None) -> Admission:
        """Keep a batch or an idle heartbeat of the configuration in force; a liveness beat
        only says the query was heard from (it carries no rates), and when: `heard_at_ms`,
        when the controller read it (its stamp, the job's clock, if not given)."""
        if sample.role is not Role.ACTIVE:
            # A standby processes nothing; its figures would dilute the active's rates.
            return Admission.STANDBY
        if sample.config_epoch < self.epoch:
            return Admission.STALE_EPOCH
        if sample.config_epoch > self.epoch:
            self.require_epoch(sample.config_epoch)
        if sample.beat:
            if self._heard(sample):
                self.beat_heard_ms = sample.batch_end_ms if heard_at_ms is None else heard_at_ms
            return Admission.BEAT
        key = sample_key(sample)
        if key in self._keys:
            return Admission.DUPLICATE
        self._insert(sample)
        if self._heard(sample) or self._follows_last(sample):
            self.last_sample = sample
        run = (sample.instance_id, sample.config_epoch)
        if sample.input_rows > 0 and run not in self._started:
            self._started.add(run)
            self._warm_up.add(key)
        return Admission.ACCEPTED

    @property
    def beat(self) -> TaskMetrics | None:
        """The newest liveness beat of the instance last heard (None: it sends none): it
        says how often it beats, and which batch it runs since when."""
        found = self._last_beat
        return found if found is not None and found.instance_id == self.last_instance else None

    def _heard(self, sample: TaskMetrics) -> bool:
        """Note when the query was last heard from, and by whom; whether `sample` is the
        newest heard."""
        if sample.batch_end_ms < (self.last_seen_ms or 0):
            return False
        self.last_seen_ms, self.last_instance = sample.batch_end_ms, sample.instance_id
        if sample.beat:
            self._last_beat = sample
        return True

    def _follows_last(self, sample: TaskMetrics) -> bool:
        """Whether `sample` ends after the newest one kept, from the instance last heard: its
        record may be read after a liveness beat stamped later (a beat has its own thread), and
        the newest sample says where the last committed batch left the sources (a lost
        query's backlog, `outage`)."""
        last = self.last_sample
        return sample.instance_id == self.last_instance and (
            last is None or sample.batch_end_ms >= last.batch_end_ms)

    def require_epoch(self, epoch: int) -> None:
        """Forget every sample older than `epoch` and refuse them from now on.

        Called when a newer configuration is seen in the metrics or acknowledged as applied:
        figures measured under the old configuration must not drive the next decision.
        """
        if epoch <= self.epoch:
            return
        self.changed = self.changed or self.last_seen_ms is not None
        self.epoch = epoch
        if epoch not in self._carried:
            self._replace([s for s in self._samples if s.config_epoch >= epoch])

    def carry_to(self, epoch: int) -> None:
        """The change at `epoch` sets no knob and restarts nothing (more executors: each
        sample counts its own task slots), so the samples before it stay valid: the query is
        sized again as soon as the cooldown ends, not after a window of long batches."""
        self._carried.add(epoch)

    def prune(self, now_ms: int) -> None:
        """Drop samples whose batch ended more than `window_s` before `now_ms`, but keep the
        newest `KEEP_NEWEST` while the newest one is inside the window.

        The window slides when a sample joins it (or when even its newest has left it), not
        at every cycle between: what the model derives from the samples is then derived once
        per batch (`memo.Memo.whole`), not again each cycle for one sample gone from the
        front. Between two batches the oldest sample may be up to a batch older than the
        window; while a batch runs long (beats only), the window stays as it was until the
        batch reports or its newest sample leaves it.

        Batches longer than a third of the window (a backlogged stateful job on few state
        partitions runs 4 000 records in ~36 s) would otherwise never fill it with enough for
        a trend, and the query would never be ready to be sized. A query that has stopped
        reporting keeps nothing: its silence is the liveness check's business."""
        horizon = now_ms - self._window_ms
        samples = self._samples
        joined, self._joined = self._joined, False
        if not samples or samples[0].batch_end_ms >= horizon:
            return
        newest_end = (samples[-1].batch_end_ms if self._ends_in_order
                      else max(s.batch_end_ms for s in samples))
        if not joined and newest_end >= horizon:
            return
        if not self._ends_in_order:
            inside = [s for s in samples if s.batch_end_ms >= horizon]
            if inside and len(inside) < KEEP_NEWEST:
                inside = list(samples)[-KEEP_NEWEST:]
            self._replace(inside)
            return
        # Ends in order (the usual case): the samples to drop are the oldest, dropped one by
        # one rather than the window rebuilt, as every query's window is each cycle.
        leaving = 1
        while leaving < len(samples) and samples[leaving].batch_end_ms < horizon:
            leaving += 1
        if leaving < len(samples):
            leaving = min(leaving, max(0, len(samples) - KEEP_NEWEST))
        for _ in range(leaving):
            self._keys.discard(sample_key(samples.popleft()))
        self._warm_up &= self._keys

    def _insert(self, sample: TaskMetrics) -> None:
        self._joined = True
        if self._samples and sample.batch_start_ms < self._samples[-1].batch_start_ms:
            # Out of order (two instances, or a late record): rare, so a full re-sort is fine.
            self._replace(sorted([*self._samples, sample], key=lambda s: s.batch_start_ms))
            return
        if len(self._samples) == self._samples.maxlen:
            self._keys.discard(sample_key(self._samples[0]))
        if self._samples and sample.batch_end_ms < self._samples[-1].batch_end_ms:
            self._ends_in_order = False
        self._samples.append(sample)
        self._keys.add(sample_key(sample))

    def _replace(self, samples: list[TaskMetrics]) -> None:
        maxlen = self._samples.maxlen
        self._samples = deque(samples[-maxlen:] if maxlen else samples, maxlen=maxlen)
        self._keys = {sample_key(s) for s in self._samples}
        self._warm_up &= self._keys
        self._ends_in_order = all(a.batch_end_ms <= b.batch_end_ms
                                  for a, b in pairwise(self._samples))


class Windows:
    """All queries' windows, at most `max_queries` of them."""

    def __init__(self, settings: ModelSettings) -> None:
        self._settings = settings
        self._by_query: dict[str, QueryWindow] = {}

    def __iter__(self) -> Iterator[QueryWindow]:
        return iter(list(self._by_query.values()))

    def get(self, query_id: str) -> QueryWindow | None:
        return self._by_query.get(query_id)

    def add(self, sample: TaskMetrics, heard_at_ms: int | None = None) -> Admission | None:
        """Offer a sample (read at `heard_at_ms`, the controller's clock); None when it
        belongs to a query beyond `max_queries`."""
        window = self._by_query.get(sample.query_id)
        if window is None:
            if len(self._by_query) >= self._settings.max_queries:
                return None
            window = QueryWindow(sample.query_id, window_s=self._settings.window_s,
                                 max_samples=self._settings.max_samples)
            self._by_query[sample.query_id] = window
        return window.add(sample, heard_at_ms)

    def forget(self, query_id: str) -> None:
        self._by_query.pop(query_id, None)

    def prune(self, now_ms: int) -> None:
        for window in self._by_query.values():
            window.prune(now_ms)
