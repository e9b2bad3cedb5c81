"""Metric traces for controller tests: a tiny simulation of a Spark query reading Kafka.

Records arrive at a piecewise-constant rate spread over the partitions (evenly, or with a share
on partition 0); each micro-batch plans against the latest offsets at its start, takes at most
`max_per_batch` records, and is busy for rows / (μ × units) seconds plus a fixed overhead (and,
for the first batch with rows, an optional warm-up). The units are those of the knob the job
names (`knob`): its input parallelism (at least one task per partition) or its state
partitions, at most the task slots; on a cluster the slots are executors × cores. Batches
run back to back when there is more to read, otherwise on the trigger; an idle query reports
only every 10 s, as Spark does. `closed_loop` runs the real control loop over such a job.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import pairwise
from unittest.mock import patch

from controller.core import memo
from controller.loop.cycle import ControlLoop, Ports
from controller.loop.fakes import (
    FakeClock,
    MemoryAckSource,
    MemoryBus,
    MemoryCluster,
    MemoryControlSink,
    MemoryDecisionLog,
    MemoryEndOffsets,
    MemoryMetricsSource,
)
from controller.loop.ports import LoopObserver, NullObserver, OffsetProbe
from controller.settings import ControllerSettings
from schemas import Ack, ControlTuple, Outcome, Role, SourcePartition, TaskMetrics

T0_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Job:
    rates: Sequence[tuple[float, float]]
    """(from second, records/s) steps of the arrival rate."""
    per_unit: float
    parallelism: int
    partitions: int = 2
    task_slots: int = 16
    max_per_batch: int = 10_000_000
    trigger_s: float = 1.0
    overhead_s: float = 0.0
    query_id: str = "q1"
    instance_id: str = "i1"
    epoch: int = 0
    report_cap: bool = False
    """Fill max_offsets_per_trigger with `max_per_batch` (jobs since the field exists do)."""
    warm_up_s: float = 0.0
    """Extra busy time of the first batch with rows (Spark's start-up of a run)."""
    source_topic: str = "in"
    sink_topic: str = "out"
    skew: float = 0.0
    """Share of the records that go to partition 0 on top of an even spread (0: even)."""
    knob: str = "input_parallelism"
    """Which knob `parallelism` is (the job's scaling parameter)."""
    input_parallelism: int = 2
    """The source's parallelism of a job scaled by its state partitions."""
    max_state_partitions: int = 0
    executor_cores: int = 0
    """Cores per executor on a cluster (task_slots = executors × cores); 0: local mode."""
    max_executors: int = 0
    cluster_priority: int = 0

    def applied(self, parameter: str, value: int, epoch: int) -> Job:
        """The job after a control tuple setting `parameter` took effect."""
        if parameter == "executors":
            return replace(self, task_slots=value * self.executor_cores, epoch=epoch)
        assert parameter == self.knob, f"{parameter} sent to a job scaled by {self.knob}"
        return replace(self, parallelism=value, epoch=epoch)

    def produced(self, t_s: float) -> float:
        total, steps = 0.0, [*self.rates, (float("inf"), 0.0)]
        for (start, rate), (end, _) in pairwise(steps):
            if t_s > start:
                total += rate * (min(t_s, end) - start)
        return total

    def latest(self, t_s: float) -> list[int]:
        total = int(self.produced(t_s))
        hot = int(total * self.skew)
        base, extra = divmod(total - hot, self.partitions)
        return [base + (1 if p < extra else 0) + (hot if p == 0 else 0)
                for p in range(self.partitions)]

    @property
    def units(self) -> int:
        floor = self.partitions if self.knob == "input_parallelism" else 1
        return min(max(self.parallelism, floor), self.task_slots)


def simulate(job: Job, seconds: float, *, start_s: float = 0.0,
             positions: list[int] | None = None, first_batch: int = 0) -> list[TaskMetrics]:
    """Batches of `job` from `start_s` for `seconds`, reading on from `positions`."""
    pos = list(positions) if positions is not None else [0] * job.partitions
    t, batch, out, last_report = start_s, first_batch, [], start_s - 10
    started = False
    while t < start_s + seconds:
        latest = job.latest(t)
        take = [min(latest[p] - pos[p], job.max_per_batch // job.partitions)
                for p in range(job.partitions)]
        rows = sum(take)
        busy = rows / (job.per_unit * job.units) + job.overhead_s
        if rows > 0 and not started:
            busy, started = busy + job.warm_up_s, True
        if rows > 0 or t - last_report >= 10:
            out.append(metrics(job, batch, t, busy, pos, take, latest))
            batch, last_report = batch + 1, t
        pos = [pos[p] + take[p] for p in range(job.partitions)]
        # A processing-time trigger: the next batch starts on the next tick, or at once when
        # this one overran it (back to back, the backlogged case).
        t += max(busy, job.trigger_s)
    return out


def metrics(job: Job, batch: int, t_s: float, busy_s: float, pos: list[int], take: list[int],
            latest: list[int]) -> TaskMetrics:
    start_ms = T0_MS + int(t_s * 1000)
    stateless = job.knob == "input_parallelism"
    return TaskMetrics(
        query_id=job.query_id, instance_id=job.instance_id, role=Role.ACTIVE,
        config_epoch=job.epoch, batch_id=batch, batch_start_ms=start_ms,
        batch_end_ms=start_ms + int(busy_s * 1000), trigger_interval_ms=int(job.trigger_s * 1000),
        input_rows=sum(take), output_rows=sum(take), busy_ms=int(busy_s * 1000),
        partitions=tuple(
            SourcePartition(job.source_topic, p, pos[p], pos[p] + take[p], latest[p])
            for p in range(job.partitions)),
        input_parallelism=job.parallelism if stateless else job.input_parallelism,
        state_partitions=0 if stateless else job.parallelism, task_slots=job.task_slots,
        source_topics=(job.source_topic,), sink_topics=(job.sink_topic,),
        max_offsets_per_trigger=job.max_per_batch if job.report_cap else 0,
        scaling_parameter=job.knob, max_state_partitions=job.max_state_partitions,
        executor_cores=job.executor_cores, max_executors=job.max_executors,
        cluster_priority=job.cluster_priority,
    )


def beat_of(job: Job, at_ms: int, running: TaskMetrics | None) -> TaskMetrics:
    """The job's liveness beat at `at_ms`: the batch it runs (its report, not out yet),
    planned to read each partition to its end offset; or none."""
    plan = () if running is None else tuple(
        SourcePartition(p.topic, p.partition, p.start_offset, p.end_offset, p.end_offset)
        for p in running.partitions)
    return TaskMetrics(
        query_id=job.query_id, instance_id=job.instance_id, role=Role.ACTIVE,
        config_epoch=job.epoch, batch_id=-1, batch_start_ms=at_ms, batch_end_ms=at_ms,
        trigger_interval_ms=int(job.trigger_s * 1000), input_rows=0, output_rows=0, busy_ms=0,
        partitions=(), input_parallelism=job.input_parallelism, state_partitions=0,
        task_slots=job.task_slots, scaling_parameter=job.knob, beat_interval_ms=1000,
        beat=True, running_batch_id=-1 if running is None else running.batch_id,
        running_since_ms=0 if running is None else running.batch_start_ms,
        running_partitions=plan)


def end_ms(trace: list[TaskMetrics]) -> int:
    return trace[-1].batch_end_ms


@contextmanager
def derived_afresh() -> Iterator[None]:
    """Within it, each query's `memo.Memo` keeps nothing: every figure is derived again from
    the whole window and each window's arrivals scanned afresh (what the memo must not change)."""
    with (patch.object(memo, "_overlap", lambda old, new: 0),
          patch.object(memo.Memo, "carried", lambda self, make, key: make())):
        yield


def memory_loop(bus: MemoryBus, clock: FakeClock, settings: ControllerSettings | None = None,
                *, offsets: OffsetProbe | None = None, observer: LoopObserver | None = None,
                polls_wait: bool = False, cluster: MemoryCluster | None = None) -> ControlLoop:
    """The real loop on `bus`'s in-memory topics and `clock`, probing `offsets` if given; with
    `polls_wait`, a poll for metrics that finds none advances `clock` by its timeout."""
    return ControlLoop(settings or ControllerSettings(), Ports(
        metrics=MemoryMetricsSource(bus.metrics, clock=clock if polls_wait else None),
        control=MemoryControlSink(bus.control, decisions=bus.decisions),
        acks=MemoryAckSource(bus.acks), decisions=MemoryDecisionLog(bus.decisions),
        clock=clock, observer=observer or NullObserver(), offsets=offsets, cluster=cluster))


Sent = tuple[float, ControlTuple, Job]
"""(second it was sent, the tuple, the job it was sent to)."""


def closed_loop(job: Job, seconds: int,
                settings: ControllerSettings | None = None) -> list[Sent]:
    """The real loop (in-memory ports, a fake clock, a cycle every 5 s) over `job`, which
    applies every tuple it is sent and acks it APPLIED; a restart of the query (its knob
    changed) takes 5 s and warms up again, an executor request is a swap that takes none."""
    return closed_loop_of([job], seconds, settings)


def closed_loop_of(jobs: list[Job], seconds: int, settings: ControllerSettings | None = None,
                   *, cluster_cores: int | None = None, bus: MemoryBus | None = None,
                   executors_answered: bool = True,
                   cluster: MemoryCluster | None = None) -> list[Sent]:
    """`closed_loop` over several jobs (by query id) under one controller, on `bus` if given;
    with `cluster_cores`, they share a cluster of that many cores, whose free ones (those no
    job's task slots hold) the controller reads (through `cluster` if given, read every 5
    s whatever the loop asks). A restart pauses the clock for every job.
    Without `executors_answered`, an executors tuple is neither applied nor acked."""
    bus, clock = bus or MemoryBus(), FakeClock(T0_MS)
    if cluster_cores is None:
        cluster = None
    elif cluster is None:
        cluster = MemoryCluster(None)
    loop = memory_loop(bus, clock, settings, cluster=cluster)
    sent: list[Sent] = []
    by_id = {job.query_id: job for job in jobs}
    batch = dict.fromkeys(by_id, 0)
    positions = {q: [0] * job.partitions for q, job in by_id.items()}
    fresh = dict.fromkeys(by_id, True)
    t = 0.0
    while t < seconds:
        for q, job in by_id.items():
            # Only the first batch of a run (start or restart) carries the warm-up.
            run = job if fresh[q] else replace(job, warm_up_s=0.0)
            chunk = simulate(run, 5, start_s=t, positions=positions[q], first_batch=batch[q])
            fresh[q] = fresh[q] and not any(s.input_rows > 0 for s in chunk)
            if chunk:
                batch[q] = chunk[-1].batch_id + 1
                positions[q] = [p.end_offset for p in chunk[-1].partitions]
                bus.publish_metrics(*chunk)
        t += 5
        clock.ms = T0_MS + int(t * 1000)
        if cluster is not None and cluster_cores is not None:
            cluster.read(cluster_cores - sum(job.task_slots for job in by_id.values()))
        loop.run_once()
        for control in bus.sent_controls()[len(sent):]:
            job = by_id[control.query_id]
            sent.append((t, control, job))
            restart = control.parameter != "executors"
            if not (restart or executors_answered):
                continue
            t += 5 if restart else 0
            by_id[job.query_id] = job.applied(control.parameter, int(control.value),
                                              control.epoch)
            fresh[job.query_id] = fresh[job.query_id] or restart
            bus.publish_ack(Ack(control.control_id, job.query_id, job.instance_id,
                                control.epoch, Outcome.APPLIED, "", 5000, clock.ms))
    return sent


@dataclass(frozen=True)
class Probed:
    """What `probed_loop` saw: the tuples sent (as `closed_loop`) and, per batch, when it
    started and ended (seconds), so a test can tell what the controller knew when."""

    sent: list[Sent]
    batches: list[tuple[float, float]]

    def running_at(self, t_s: float) -> tuple[float, float] | None:
        """The batch running at `t_s`, if one was."""
        return next(((s, e) for s, e in self.batches if s <= t_s < e), None)


def probed_loop(job: Job, seconds: int, settings: ControllerSettings | None = None, *,
                probe: bool = True, beats: bool = True, restart_s: float = 5.0,
                ack_after_s: int = 0) -> Probed:
    """The real loop cycling every second over `job`, event by event: each batch plans against
    the latest offsets at its start and is published when it *ends* (as Spark's listener
    does), and, with `probe`, the broker's end offsets are what the producer has written by
    each cycle. With `beats`, the job beats every second with the batch it runs (as
    `observe.metrics.beat` does). The job applies every tuple it is sent and acks it APPLIED;
    a knob change restarts the query, which plans its next batch `restart_s` later (warming up
    again). The job applies a tuple `ack_after_s` cycles after it was sent, and acks it then:
    a real job answers once its query has stopped and started again, seconds later, and until
    then reports its old configuration."""
    bus, clock = MemoryBus(), FakeClock(T0_MS)
    offsets = MemoryEndOffsets()
    loop = memory_loop(bus, clock, settings, offsets=offsets if probe else None)
    sent: list[Sent] = []
    batches: list[tuple[float, float]] = []
    pending: list[TaskMetrics] = []
    pos, batch, next_start, fresh, last_report = [0] * job.partitions, 0, 0.0, True, -10.0
    answers: list[tuple[int, ControlTuple]] = []
    for tick in range(1, seconds + 1):
        while next_start < tick:
            t = next_start
            latest = job.latest(t)
            take = [min(latest[p] - pos[p], job.max_per_batch // job.partitions)
                    for p in range(job.partitions)]
            busy = sum(take) / (job.per_unit * job.units) + job.overhead_s
            if sum(take) > 0 and fresh:
                busy, fresh = busy + job.warm_up_s, False
            if sum(take) > 0 or t - last_report >= 10:
                pending.append(metrics(job, batch, t, busy, pos, take, latest))
                batches.append((t, t + busy))
                batch, last_report = batch + 1, t
            pos = [pos[p] + take[p] for p in range(job.partitions)]
            next_start = t + max(busy, job.trigger_s)
        clock.ms = T0_MS + tick * 1000
        bus.publish_metrics(*(s for s in pending if s.batch_end_ms <= clock.ms))
        pending = [s for s in pending if s.batch_end_ms > clock.ms]
        if beats:
            bus.publish_metrics(beat_of(job, clock.ms, next(
                (s for s in pending if s.batch_start_ms <= clock.ms), None)))
        offsets.ends = {(job.source_topic, p): n for p, n in enumerate(job.latest(tick))}
        loop.run_once()
        for control in bus.sent_controls()[len(sent):]:
            sent.append((tick, control, job))
            answers.append((tick + ack_after_s, control))
        due = [control for at, control in answers if at <= tick]
        answers = [(at, control) for at, control in answers if at > tick]
        for control in due:
            job = job.applied(control.parameter, int(control.value), control.epoch)
            if control.parameter != "executors":  # a restart: after the running batch
                next_start, fresh = max(next_start, tick) + restart_s, True
            bus.publish_ack(Ack(control.control_id, job.query_id, job.instance_id,
                                control.epoch, Outcome.APPLIED, "", int(restart_s * 1000),
                                clock.ms))
    return Probed(sent, batches)
