"""What the demo shows about a query, folded from its metrics records (pure, no I/O).

The demo's figures are deliberately computed here from the raw metrics, independently of the
controller's model, so the terminal shows what the job reported rather than what the
controller believes.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas import TaskMetrics
from schemas.records import Role

_SMOOTHING_MS = 6_000


@dataclass
class QueryView:
    """Recent metrics of one query and the figures derived from them."""

    query_id: str
    samples: deque[TaskMetrics] = field(default_factory=lambda: deque(maxlen=200))

    last_beat: TaskMetrics | None = None
    """The active instance's newest liveness beat: which batch it runs, since when."""

    def add(self, m: TaskMetrics) -> None:
        """Keep an active instance's batch; a standby's heartbeat describes no batch (its
        offsets are not the query's), and would make the newest sample a batch-less one; a
        liveness beat is no batch either (its offsets are where the running batch will end)."""
        if m.role is not Role.ACTIVE:
            return
        if m.beat:
            self.last_beat = m
        else:
            self.samples.append(m)

    def _recent(self) -> list[TaskMetrics]:
        """The samples of the last few seconds, and never fewer than the last three: when
        batches take longer than the smoothing span, rates still need two intervals."""
        if not self.samples:
            return []
        newest = self.samples[-1].batch_end_ms
        recent = [s for s in self.samples if newest - s.batch_end_ms <= _SMOOTHING_MS]
        return recent if len(recent) >= 3 else list(self.samples)[-3:]

    def arrival_per_s(self) -> float:
        recent = [s for s in self._recent() if s.partitions]
        if len(recent) < 2:
            return 0.0
        first, last = recent[0], recent[-1]
        span_s = (last.batch_start_ms - first.batch_start_ms) / 1000
        # A restarted query first replays the batch planned before the change, whose latest
        # offsets are older than the previous batch's: never report that as negative arrival.
        grown = max(0, _latest(last) - _latest(first))
        return grown / span_s if span_s > 0 else 0.0

    def processed_per_s(self) -> float:
        recent = self._recent()
        if len(recent) < 2:
            return 0.0
        span_s = (recent[-1].batch_end_ms - recent[0].batch_end_ms) / 1000
        rows = sum(s.input_rows for s in recent[1:])
        return rows / span_s if span_s > 0 else 0.0

    def capacity_per_s(self) -> float:
        """Records per second of busy time over the recent batches: what the query gets
        through running flat out (0 before a batch with rows)."""
        recent = [s for s in self._recent() if s.input_rows > 0]
        busy_ms = sum(s.busy_ms for s in recent)
        return sum(s.input_rows for s in recent) * 1000 / busy_ms if busy_ms > 0 else 0.0

    def lag_records(self, log_end_total: int | None = None) -> int:
        """Records in the input topic that no committed batch has processed yet.

        With `log_end_total` (Σ of the input partitions' end offsets, read from the broker
        now) this is the true lag; without it, the newest batch's latest − end, which misses
        what arrived while that batch ran.
        """
        if not self.samples:
            return 0
        newest = self.samples[-1]
        done = sum(p.end_offset for p in newest.partitions)
        if log_end_total is not None:
            return max(0, log_end_total - done)
        return sum(max(0, p.latest_offset - p.end_offset) for p in newest.partitions)

    def parallelism(self) -> int:
        """The value of the knob the job scales with (input parallelism or state partitions)."""
        if not self.samples:
            return 0
        newest = self.samples[-1]
        return int(getattr(newest, newest.scaling_parameter, newest.input_parallelism))

    def epoch(self) -> int:
        return self.samples[-1].config_epoch if self.samples else 0

    def batch_seconds(self) -> float:
        return self.samples[-1].busy_ms / 1000 if self.samples else 0.0


def _latest(m: TaskMetrics) -> int:
    return sum(p.latest_offset for p in m.partitions)


HEADER = (f"{'time':>6}  {'load/s':>7}  {'arrival/s':>9}  {'processed/s':>11}  {'lag':>7}  "
          f"{'batch s':>7}  {'parallelism':>11}  {'epoch':>5}")


def status_line(elapsed_s: float, load_per_s: float, view: QueryView | None,
                log_end_total: int | None = None) -> str:
    if view is None or not view.samples:
        return f"{elapsed_s:6.0f}  {load_per_s:7.0f}  (waiting for the job's first metrics)"
    return (
        f"{elapsed_s:6.0f}  {load_per_s:7.0f}  {view.arrival_per_s():9.0f}  "
        f"{view.processed_per_s():11.0f}  {view.lag_records(log_end_total):7d}  "
        f"{view.batch_seconds():7.1f}  "
        f"{view.parallelism():11d}  {view.epoch():5d}"
    )


def full_batch_rate(samples: Sequence[TaskMetrics], batch_cap: int) -> float | None:
    """Records/s a job processed in its full batches (at least 90 % of `batch_cap`), each
    run's first one left out (its warm-up): the median, or None without such a batch. Its
    capacity, when measured while it worked through a burst of at least a few batches."""
    first: dict[tuple[str, int], int] = {}
    for m in samples:
        first.setdefault((m.instance_id, m.config_epoch), m.batch_id)
    full = [m.input_rows / (m.busy_ms / 1000) for m in samples
            if m.input_rows >= 0.9 * batch_cap and m.busy_ms > 0
            and m.batch_id != first[(m.instance_id, m.config_epoch)]]
    return statistics.median(full) if full else None
