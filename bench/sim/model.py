"""A fast queueing model of micro-batch jobs reading and writing Kafka topics.

Owns the job side of the simulation: per job the micro-batch cycle of a Spark Structured
Streaming query with a Kafka source and a processing-time trigger, plus the reconfiguration
protocol of `streaming_jobs`. It emits `TaskMetrics` and `Ack`s exactly where the real job
does, in simulated time (integer milliseconds, no sleeping). Neighbours: `topics` (what the
jobs read and write), `run` drives it tick by tick and hands what it emits to a policy. It
never imports the controller.

What one batch does, as in Spark: at its start it plans against the latest offsets (capped by
its batch cap, maxOffsetsPerTrigger: `max_per_batch` until a tuple sets it, prorated over
partitions by their lag like the Kafka source's rate limit), is
busy rows / (μ × units) + a fixed overhead, commits, and then writes selectivity × rows to its
sink topic. The next batch starts on the next trigger tick, or at once when the batch overran
the interval. A trigger with nothing new runs no batch; an idle query reports every
`idle_report_s`. A control tuple is applied as `streaming_jobs.runtime` does: quiesce (the
running batch commits, no new one starts), a restart of `restart_s` with no batch running,
then the first batch of the new run; the ack (APPLIED, with the pause from the last commit
before to the first commit after) is sent when that batch commits.

The knob is the one the job's plan names (`JobSpec.scaling_parameter`): the input parallelism
(a unit per source task, at least one per partition) or the state partitions (a unit per state
partition). A tuple may set the knob and the batch cap together; either changed restarts
the query with both. On a cluster (`executor_cores` > 0) the task slots are executors × cores
and an `executors` tuple is a swap, as in the job: no restart, the epoch moves at once, and the
ack comes when the new executors run (`executor_start_s` later; at once when fewer are asked
for). One that sets the knob or the cap too restarts, as the job's does: the new run asks for
the executors, and its first commit acks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from bench.sim.topics import PipeTopic, Topic, plan
from schemas import Ack, ControlTuple, Outcome, Role, SourcePartition, TaskMetrics
from schemas.knobs import EXECUTORS, MAX_OFFSETS_PER_TRIGGER

T0_MS = 1_700_000_000_000
"""Simulated time 0 as epoch milliseconds in the records."""

IDLE_BUSY_MS = 5
"""An idle trigger still asks the broker for the latest offsets; a few ms."""


@dataclass(frozen=True)
class JobSpec:
    """One job's parameters. Defaults are the bundled job measured on a 2-core laptop
    (`bench.throughput` on 2026-11-22: 339, 602, 1063 records/s at 2, 4, 8 with 4 000-record
    batches fit μ ≈ 200/s per unit plus ≈ 1.5 s per batch; `bench/results/throughput.json`
    holds later runs, which these defaults do not follow)."""

    query_id: str
    source_topic: str
    sink_topic: str
    rate_per_unit: float = 200.0
    """μ: records/s one unit of parallelism processes while busy."""
    overhead_s: float = 1.5
    """Fixed cost of every batch (planning, scheduling, commit), whatever its size."""
    max_per_batch: int = 4000
    """maxOffsetsPerTrigger at the start."""
    max_batch_cap: int = 100_000
    """The most a tuple may raise maxOffsetsPerTrigger to (the job's
    `--max-offsets-per-trigger-limit`, at its default), reported as the real job does: the
    controller raises the cap with the units (`ModelSettings.batch_cap_follows_units`). 0: a
    job that reports none, whose cap no tuple sets. At least `max_per_batch`, as the job's
    start checks its starting cap against it."""
    trigger_s: float = 2.0
    task_slots: int = 16
    selectivity: float = 1.0
    """Output records per input record."""
    restart_s: float = 5.0
    """Reconfiguration: time with no batch running between the quiesced commit and the first
    batch of the restarted query (measured 1.7–9 s on the laptop)."""
    parallelism: int = 2
    """The knob's value at the start."""
    idle_report_s: float = 10.0
    """Spark's noDataProgressEventInterval."""
    instance_id: str = "sim-1"
    scaling_parameter: str = "input_parallelism"
    """The knob the job's capacity grows with: input_parallelism or state_partitions."""
    max_state_partitions: int = 64
    """The job's --max-state-partitions (its default)."""
    executor_cores: int = 0
    """Cores per executor on a cluster (`task_slots` is then executors × cores at the start);
    0: local mode."""
    max_executors: int = 0
    """The job's --max-executors on a cluster."""
    max_delay_s: float = 0.0
    """The delay objective the job states (`--max-delay-s`); 0: none."""
    executor_start_s: float = 8.0
    """How long new executors take to run after a request: 7.8 s (and 19.5 s under more load)
    on the laptop's standalone cluster (docs/deploy.md, 'On a cluster')."""

    def __post_init__(self) -> None:
        if 0 < self.max_batch_cap < self.max_per_batch:
            raise ValueError(f"max_per_batch={self.max_per_batch}: expected an integer in [1, "
                             f"{self.max_batch_cap}] (max_batch_cap)")

    def units(self, parallelism: int, partitions: int, task_slots: int) -> int:
        """Tasks of the costly stage that run at once: source tasks (at least one per Kafka
        partition) or state partitions, at most the slots."""
        floor = partitions if self.scaling_parameter == "input_parallelism" else 1
        return min(max(parallelism, floor, 1), task_slots)

    def knob_max(self) -> int:
        """The job's bound for its knob: the state partitions' own, else the task slots it can
        have (locally its local[N], on a cluster every executor's cores)."""
        if self.scaling_parameter == "state_partitions":
            return self.max_state_partitions
        return self.max_executors * self.executor_cores or self.task_slots


@dataclass
class _Batch:
    batch_id: int
    start_ms: int
    end_ms: int
    starts: list[int]
    take: list[int]
    latest: list[int]


class Phase(StrEnum):
    QUIESCING = "quiescing"
    """The running batch may commit; no new one starts."""
    RESTARTING = "restarting"
    """No batch runs until `restart_until_ms`."""
    FIRST_BATCH = "first_batch"
    """The restarted query's first batch is running; its commit ends the pause."""


@dataclass
class _Executors:
    """Executors requested, waiting to run."""

    control: ControlTuple | None
    """The executors tuple, acked once they run; None: requested by a restart, whose ack the
    first batch of the new run sent (the runtime's restart waits for no executors)."""
    slots: int
    ready_ms: int


@dataclass
class _Reconfig:
    control: ControlTuple
    value: int
    """The knob's value in the new run."""
    batch_cap: int
    """maxOffsetsPerTrigger in the new run."""
    began_ms: int
    executors: int = 0
    """Executors the new run requests as it starts (0: as before)."""
    phase: Phase = Phase.QUIESCING
    last_commit_ms: int = 0
    """Where the pause starts: the later of the last commit and the change's start, as the
    runtime measures it (`reconfigure.pause_start`)."""
    restart_until_ms: int = 0


class SimJob:
    """One query instance; `advance_to` runs its events in time order."""

    def __init__(self, spec: JobSpec, source: Topic, sink: PipeTopic | None) -> None:
        self.spec, self.source, self.sink = spec, source, sink
        self.parallelism, self.epoch, self.next_batch_id = spec.parallelism, 0, 0
        self.batch_cap = spec.max_per_batch
        self.positions = [0] * source.partitions
        self.processed, self.output = 0, 0
        self.running: _Batch | None = None
        self.planned: _Batch | None = None
        """The newest batch with rows planned, running or committed (`waiting`)."""
        self.peak_waiting = 0
        """The most `waiting` was at a batch's end since `take_peak_waiting` last ran."""
        self.next_trigger_ms = 0
        self.last_report_ms: int | None = None
        self.last_commit_ms: int | None = None
        self.reconfig: _Reconfig | None = None
        self.task_slots = spec.task_slots
        self.growing: _Executors | None = None
        self.queued: list[ControlTuple] = []
        self.outbox_metrics: list[TaskMetrics] = []
        self.outbox_acks: list[Ack] = []

    @property
    def units(self) -> int:
        return self.spec.units(self.parallelism, self.source.partitions, self.task_slots)

    def backlog(self, t_ms: int) -> int:
        """Records in the source topic not yet committed (a running batch's count too)."""
        return sum(self.source.end_offsets(t_ms)) - self.processed

    def take_peak_waiting(self, t_ms: int) -> int:
        """The most `waiting` was since this was last asked: at `t_ms`, or as a batch ended
        (where the policy reads it, and where it peaks: a tick between two batches would see
        only part of what the running batch's overrun leaves)."""
        peak, self.peak_waiting = max(self.peak_waiting, self.waiting(t_ms)), 0
        return peak

    def waiting(self, t_ms: int) -> int:
        """The backlog as the policy counts it (`model.backlog_records`,
        `probes.running_backlog`): what the newest batch planned left behind, plus what
        arrived more than a trigger interval after that plan. What arrives within one waits
        for the next trigger as a matter of course, and a running batch's records are read
        already."""
        if self.planned is None:
            return self.backlog(t_ms)
        plan = self.planned
        gathered_until = min(t_ms, plan.start_ms + int(self.spec.trigger_s * 1000))
        return (sum(plan.latest) - sum(plan.starts) - sum(plan.take)
                + sum(self.source.end_offsets(t_ms))
                - sum(self.source.end_offsets(gathered_until)))

    # -- control ---------------------------------------------------------------------------

    def deliver(self, control: ControlTuple, t_ms: int) -> None:
        """A control tuple for this query arrived; the job handles one at a time."""
        self.queued.append(control)
        self._next_control(t_ms)

    def _next_control(self, t_ms: int) -> None:
        while (self.reconfig is None and self.queued
               and (self.growing is None or self.growing.control is None)):
            control = self.queued.pop(0)
            found = self._evaluate(control)
            if isinstance(found, str):
                self._ack(control, Outcome.REJECTED, found, 0, t_ms)
                continue
            knob = found.get(self.spec.scaling_parameter, self.parallelism)
            cap = found.get(MAX_OFFSETS_PER_TRIGGER, self.batch_cap)
            executors = found.get(EXECUTORS, 0)
            if (knob, cap) != (self.parallelism, self.batch_cap):  # as the runtime: a restart
                self.reconfig = _Reconfig(control, knob, cap, t_ms, executors)
                if self.running is None:
                    self._restart(t_ms)
            elif executors:
                self._request_executors(control, executors, t_ms)
            else:
                self.epoch = control.epoch
                self._ack(control, Outcome.APPLIED, f"{control.describe()} already in force; "
                          f"epoch advanced to {control.epoch}", 0, t_ms)

    def _evaluate(self, control: ControlTuple) -> dict[str, int] | str:
        """Every knob the tuple sets, together with its own, or why it is rejected (as
        `streaming_jobs.runtime.control.tuples`): one out of the job's bounds rejects all."""
        found = {}
        for setting in control.settings:
            try:
                value = int(setting.value)
            except ValueError:
                value = 0
            if not 1 <= value <= self._most(setting.parameter):
                return f"bad {setting.parameter}={setting.value!r}"
            found[setting.parameter] = value
        if control.epoch <= self.epoch:
            return f"stale epoch {control.epoch} ≤ {self.epoch} in force"
        return found

    def _most(self, parameter: str) -> int:
        """The highest value a tuple may set `parameter` to (0: the job has no such knob)."""
        spec = self.spec
        if parameter == EXECUTORS:
            return spec.max_executors if spec.executor_cores > 0 else 0
        if parameter == MAX_OFFSETS_PER_TRIGGER:
            return spec.max_batch_cap
        return spec.knob_max() if parameter == spec.scaling_parameter else 0

    def _request_executors(self, control: ControlTuple | None, executors: int,
                           t_ms: int) -> None:
        """Executors asked for: a swap at the batch boundary (`control`, whose epoch the next
        batch carries), or as a restart's new run starts (None)."""
        if control is not None:
            self.epoch = control.epoch
        slots = executors * self.spec.executor_cores
        wait_ms = int(self.spec.executor_start_s * 1000) if slots > self.task_slots else 0
        self.growing = _Executors(control, slots, t_ms + wait_ms)
        if wait_ms == 0:
            self._executors_run()

    def _executors_run(self) -> None:
        assert self.growing is not None
        growing, self.growing = self.growing, None
        self.task_slots = growing.slots
        if growing.control is not None:
            self._ack(growing.control, Outcome.APPLIED,
                      f"executors → {growing.control.value} ({growing.slots} task slots)", 0,
                      growing.ready_ms)
        self._next_control(growing.ready_ms)

    def _restart(self, t_ms: int) -> None:
        assert self.reconfig is not None
        self.reconfig.phase = Phase.RESTARTING
        self.reconfig.last_commit_ms = max(self.reconfig.began_ms, self.last_commit_ms
                                           if self.last_commit_ms is not None else t_ms)
        self.reconfig.restart_until_ms = t_ms + int(self.spec.restart_s * 1000)

    def _ack(self, control: ControlTuple, outcome: Outcome, detail: str, pause_ms: int,
             t_ms: int) -> None:
        self.outbox_acks.append(Ack(
            control_id=control.control_id, query_id=control.query_id,
            instance_id=self.spec.instance_id, epoch=control.epoch, outcome=outcome,
            detail=detail, pause_ms=pause_ms, acked_at_ms=T0_MS + t_ms))

    # -- time --------------------------------------------------------------------------------

    def advance_to(self, t_ms: int) -> None:
        while True:
            event_ms = self._next_event_ms()
            if self.growing is not None and self.growing.ready_ms <= min(event_ms, t_ms):
                self._executors_run()
                continue
            if event_ms > t_ms:
                return
            if self.running is not None:
                self._commit(self.running)
            elif self.reconfig is not None and self.reconfig.phase is Phase.RESTARTING:
                self._resume(event_ms)
            else:
                self._trigger(event_ms)

    def _next_event_ms(self) -> int:
        if self.running is not None:
            return self.running.end_ms
        if self.reconfig is not None and self.reconfig.phase is Phase.RESTARTING:
            return self.reconfig.restart_until_ms
        return self.next_trigger_ms

    def _trigger(self, t_ms: int) -> None:
        latest = self.source.end_offsets(t_ms)
        lag = [end - pos for end, pos in zip(latest, self.positions, strict=True)]
        take = plan(lag, self.batch_cap)
        rows = sum(take)
        if rows == 0:
            self.next_trigger_ms = t_ms + int(self.spec.trigger_s * 1000)
            if (self.last_report_ms is None
                    or t_ms - self.last_report_ms >= self.spec.idle_report_s * 1000):
                self.last_report_ms = t_ms
                self.outbox_metrics.append(self._metrics(
                    _Batch(-1, t_ms, t_ms + IDLE_BUSY_MS, list(self.positions),
                           [0] * len(take), latest), rows=0))
            return
        busy_ms = round((rows / (self.spec.rate_per_unit * self.units)
                         + self.spec.overhead_s) * 1000)
        self.running = self.planned = _Batch(self.next_batch_id, t_ms, t_ms + busy_ms,
                                             list(self.positions), take, latest)
        self.next_batch_id += 1

    def _commit(self, batch: _Batch) -> None:
        # The policy reads its backlog off each batch as it ends (`waiting`, at its peak then).
        self.peak_waiting = max(self.peak_waiting, self.waiting(batch.end_ms))
        self.running = None
        rows = sum(batch.take)
        self.positions = [s + n for s, n in zip(batch.starts, batch.take, strict=True)]
        self.processed += rows
        # Cumulative rounding keeps Σ output = selectivity × Σ input exact over the run.
        produced = math.floor(self.processed * self.spec.selectivity + 1e-9)
        out, self.output = produced - self.output, produced
        if self.sink is not None:
            self.sink.append(batch.end_ms, out)
        self.outbox_metrics.append(self._metrics(batch, rows=rows, output_rows=out))
        self.last_commit_ms = self.last_report_ms = batch.end_ms
        trigger_ms = int(self.spec.trigger_s * 1000)
        self.next_trigger_ms = max(batch.end_ms, batch.start_ms + trigger_ms)
        if self.reconfig is None:
            return
        if self.reconfig.phase is Phase.QUIESCING:  # this was the last batch of the old run
            self._restart(batch.end_ms)
        else:
            self._finish_reconfig(batch.end_ms)

    def _resume(self, t_ms: int) -> None:
        """The restarted query is up with the new value and epoch; it triggers at once."""
        assert self.reconfig is not None
        self.parallelism, self.epoch = self.reconfig.value, self.reconfig.control.epoch
        self.batch_cap = self.reconfig.batch_cap
        if self.reconfig.executors:
            self._request_executors(None, self.reconfig.executors, t_ms)
        self.reconfig.phase = Phase.FIRST_BATCH
        self._trigger(t_ms)
        if self.running is None:  # nothing to read: the pause ends when it is seen idle
            self._finish_reconfig(t_ms)

    def _finish_reconfig(self, t_ms: int) -> None:
        assert self.reconfig is not None
        reconfig, self.reconfig = self.reconfig, None
        self._ack(reconfig.control, Outcome.APPLIED, reconfig.control.describe(),
                  t_ms - reconfig.last_commit_ms, t_ms)
        self._next_control(t_ms)

    def _metrics(self, batch: _Batch, rows: int, output_rows: int = 0) -> TaskMetrics:
        spec = self.spec
        by_source = spec.scaling_parameter == "input_parallelism"
        return TaskMetrics(
            query_id=spec.query_id, instance_id=spec.instance_id, role=Role.ACTIVE,
            config_epoch=self.epoch, batch_id=batch.batch_id,
            batch_start_ms=T0_MS + batch.start_ms, batch_end_ms=T0_MS + batch.end_ms,
            trigger_interval_ms=int(spec.trigger_s * 1000), input_rows=rows,
            output_rows=output_rows, busy_ms=batch.end_ms - batch.start_ms,
            partitions=tuple(
                SourcePartition(self.source.name, p,
                                -1 if batch.batch_id == 0 else batch.starts[p],
                                batch.starts[p] + batch.take[p], batch.latest[p])
                for p in range(len(batch.starts))),
            input_parallelism=self.parallelism if by_source else self.source.partitions,
            state_partitions=0 if by_source else self.parallelism,
            task_slots=self.task_slots, max_offsets_per_trigger=self.batch_cap,
            max_batch_cap=spec.max_batch_cap,
            scaling_parameter=spec.scaling_parameter,
            max_state_partitions=0 if by_source else spec.max_state_partitions,
            executor_cores=spec.executor_cores, max_executors=spec.max_executors,
            source_topics=(self.source.name,), max_delay_ms=int(spec.max_delay_s * 1000),
            sink_topics=(self.sink.name,) if self.sink is not None else (spec.sink_topic,))
