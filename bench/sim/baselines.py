"""Baseline policies written for comparison, in the manner of published autoscalers.

Owns two reactive baselines and the little bookkeeping they share (newest metrics per query,
one tuple in flight per query, epochs). Neither has a rate model; both see the same metrics as
ours and answer with the same control tuples, for the knob the job names (its input
parallelism or its state partitions); neither asks a cluster for executors.

- `Threshold`, after Spark Streaming's (DStreams) dynamic allocation
  (`streaming/scheduler/ExecutorAllocationManager`): every scaling interval, the average batch
  processing time ÷ batch interval; ≥ 0.9 adds max(round(ratio), 1) units, ≤ 0.3 removes one.
  The interval restarts after each change is applied, its own cooldown.
- `Backpressure`, after Dhalion (Floratou et al., VLDB 2017) as DS2 compared against it: each
  round, find the one job whose backlog is above a threshold and not shrinking (its
  "backpressure"), the most backlogged if several, raise it by a fixed step, and wait a round
  to observe before the next diagnosis. One bottleneck per round; it never scales down.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from schemas import Ack, ControlTuple, TaskMetrics

ISSUER = "sim-baseline"


@dataclass
class _Query:
    newest: TaskMetrics
    partitions: int
    in_flight: ControlTuple | None = None
    last_epoch: int = 0
    settled_ms: int = 0
    """When the last change was answered (the start of a fresh observation)."""


class _Actuator:
    """Newest metrics per query and one tuple in flight per query, as the real loop keeps."""

    name = "baseline"

    def __init__(self) -> None:
        self.queries: dict[str, _Query] = {}
        self._ids = itertools.count()

    def observe(self, metrics: Sequence[TaskMetrics], acks: Sequence[Ack], now_ms: int) -> None:
        for sample in metrics:
            query = self.queries.get(sample.query_id)
            if query is None:
                self.queries[sample.query_id] = _Query(sample, len(sample.partitions),
                                                       settled_ms=now_ms)
            elif sample.config_epoch >= query.newest.config_epoch:
                query.newest = sample
        for ack in acks:
            query = self.queries.get(ack.query_id)
            if query is not None and query.in_flight is not None \
                    and query.in_flight.control_id == ack.control_id:
                query.in_flight, query.settled_ms = None, now_ms
                self.settled(ack.query_id, now_ms)

    def settled(self, query_id: str, now_ms: int) -> None:
        """Hook: a change was answered."""

    def control(self, query_id: str, target: int, reason: str, now_ms: int) -> ControlTuple:
        query = self.queries[query_id]
        query.last_epoch = max(query.last_epoch, query.newest.config_epoch) + 1
        query.in_flight = ControlTuple(
            control_id=f"{self.name}-{next(self._ids)}", query_id=query_id,
            operator_id="source", parameter=query.newest.scaling_parameter, value=str(target),
            epoch=query.last_epoch, issuer=ISSUER, reason=reason, issued_at_ms=now_ms)
        return query.in_flight

    def bounds(self, query: _Query) -> tuple[int, int]:
        """The same knob limits as ours: not below the partitions (input parallelism), not
        above the slots."""
        by_source = query.newest.scaling_parameter == "input_parallelism"
        return query.partitions if by_source else 1, query.newest.task_slots


def knob(sample: TaskMetrics) -> int:
    """The value of the knob the job scales by."""
    return (sample.input_parallelism if sample.scaling_parameter == "input_parallelism"
            else sample.state_partitions)


class Threshold(_Actuator):
    name = "threshold"

    def __init__(self, interval_s: float = 60.0, up_ratio: float = 0.9,
                 down_ratio: float = 0.3) -> None:
        super().__init__()
        self.interval_ms = int(interval_s * 1000)
        self.up_ratio, self.down_ratio = up_ratio, down_ratio
        self._busy: dict[str, list[int]] = {}
        self._seen: set[tuple[str, int, int]] = set()

    def settled(self, query_id: str, now_ms: int) -> None:
        self._busy[query_id] = []

    def step(self, metrics: Sequence[TaskMetrics], acks: Sequence[Ack],
             now_ms: int) -> list[ControlTuple]:
        self.observe(metrics, acks, now_ms)
        for sample in metrics:
            query = self.queries[sample.query_id]
            # Batches that ran, of the configuration in force (an idle report ran none).
            if sample.batch_id >= 0 and sample.config_epoch == query.newest.config_epoch:
                self._busy.setdefault(sample.query_id, []).append(sample.busy_ms)
        return [c for qid in self.queries if (c := self._decide(qid, now_ms)) is not None]

    def _decide(self, query_id: str, now_ms: int) -> ControlTuple | None:
        query = self.queries[query_id]
        if query.in_flight is not None or now_ms - query.settled_ms < self.interval_ms:
            return None
        busy = self._busy.get(query_id, [])
        query.settled_ms, self._busy[query_id] = now_ms, []
        if not busy:
            return None
        ratio = sum(busy) / len(busy) / query.newest.trigger_interval_ms
        low, high = self.bounds(query)
        current = knob(query.newest)
        if ratio >= self.up_ratio:
            target = min(high, current + max(round(ratio), 1))
        elif ratio <= self.down_ratio:
            target = max(low, current - 1)
        else:
            return None
        if target == current:
            return None
        return self.control(query_id, target, f"batch time / interval = {ratio:.2f}", now_ms)


class Backpressure(_Actuator):
    name = "backpressure"

    def __init__(self, step_units: int = 2, round_s: float = 60.0,
                 threshold_records: float = 1000.0) -> None:
        super().__init__()
        self.step_units, self.round_ms = step_units, int(round_s * 1000)
        self.threshold = threshold_records
        self._round_start_ms = 0
        self._lag_at_round_start: dict[str, int] = {}

    def step(self, metrics: Sequence[TaskMetrics], acks: Sequence[Ack],
             now_ms: int) -> list[ControlTuple]:
        self.observe(metrics, acks, now_ms)
        if not self.queries or any(q.in_flight is not None for q in self.queries.values()):
            return []
        settled = max(q.settled_ms for q in self.queries.values())
        if now_ms - max(self._round_start_ms, settled) < self.round_ms:
            return []
        pressured = {qid: lag for qid, q in self.queries.items()
                     if (lag := _lag(q.newest)) > self.threshold
                     and lag >= self._lag_at_round_start.get(qid, 0)}
        self._round_start_ms = now_ms
        self._lag_at_round_start = {qid: _lag(q.newest) for qid, q in self.queries.items()}
        for query_id in sorted(pressured, key=pressured.__getitem__, reverse=True):
            query = self.queries[query_id]
            current = knob(query.newest)
            target = min(self.bounds(query)[1], current + self.step_units)
            if target > current:
                return [self.control(query_id, target, f"most backlogged: {pressured[query_id]} "
                                     f"records behind and not shrinking", now_ms)]
        return []


def _lag(sample: TaskMetrics) -> int:
    return sum(max(0, p.latest_offset - p.end_offset) for p in sample.partitions)
