"""One run: a scenario's jobs and topics, a policy, and a clock that ticks in simulated time.

Owns the wiring (a job's sink topic is the next job's source topic), the order of one tick
(jobs advance upstream first → the policy sees what they emitted → its tuples reach the jobs)
and the record of what happened (`Trace`). `measures` turns a trace into the table's figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bench.sim.model import T0_MS, JobSpec, SimJob
from bench.sim.policies import Policy
from bench.sim.profiles import Profile
from bench.sim.topics import ExternalTopic, PipeTopic, Topic
from schemas import Ack, ControlTuple, TaskMetrics


@dataclass(frozen=True)
class Scenario:
    name: str
    profile: Profile
    """Arrivals into the first job's source topic."""
    jobs: tuple[JobSpec, ...]
    """In pipeline order: each job's sink topic is the next one's source topic."""
    duration_s: int = 900
    warmup_s: int = 120
    """The jobs run this long before the policy starts and the record begins, so every policy
    meets a job in its steady state (as a controller started next to a running job does),
    not the fill-up of a job started from nothing."""
    source_partitions: int = 2
    """Partitions of every topic."""
    backlog_target_s: float = 10.0
    """A job is over target when its backlog exceeds what reached it in the last this many
    seconds at nominal rates (the profile times the selectivities upstream of it): a backlog
    older than that means records wait longer than that."""
    tick_s: float = 1.0
    """How often the policy runs (the real controller polls metrics with a 1 s timeout)."""

    def backlog_target(self, job_index: int, t_s: float) -> float:
        """Records that reached the job in the last `backlog_target_s` at nominal rates."""
        arrived = (self.profile.produced(t_s)
                   - self.profile.produced(t_s - self.backlog_target_s))
        for spec in self.jobs[:job_index]:
            arrived *= spec.selectivity
        return arrived


@dataclass
class Trace:
    """Everything a run produced, for measures and tests."""

    scenario: Scenario
    policy: str
    times_s: list[float] = field(default_factory=list)
    units: dict[str, list[int]] = field(default_factory=dict)
    backlog: dict[str, list[int]] = field(default_factory=dict)
    waiting: dict[str, list[int]] = field(default_factory=dict)
    """Per tick, the backlog as the policy counts it, beyond the records a batch reads or
    gathers as a matter of course: the most it was since the tick before, at the tick or as a
    batch ended (`SimJob.take_peak_waiting`; a real run's, sampled each second:
    `bench.day.real.beyond_in_flight`); `backlog` counts those records too, as a record's
    wait does."""
    metrics: list[TaskMetrics] = field(default_factory=list)
    controls: list[tuple[float, ControlTuple]] = field(default_factory=list)
    acks: list[tuple[float, Ack]] = field(default_factory=list)


class World:
    """The jobs of a scenario and their topics."""

    def __init__(self, scenario: Scenario) -> None:
        self.source = ExternalTopic(scenario.jobs[0].source_topic, scenario.source_partitions,
                                    scenario.profile)
        first: Topic = self.source
        self.jobs: list[SimJob] = []
        for spec in scenario.jobs:
            sink = PipeTopic(spec.sink_topic, scenario.source_partitions)
            self.jobs.append(SimJob(spec, first, sink))
            first = sink
        self.by_query = {job.spec.query_id: job for job in self.jobs}

    def advance_to(self, t_ms: int) -> tuple[list[TaskMetrics], list[Ack]]:
        """Run every job to `t_ms`, upstream first so a downstream job plans against what its
        upstream committed before then; return what they emitted, in time order."""
        metrics: list[TaskMetrics] = []
        acks: list[Ack] = []
        for job in self.jobs:
            job.advance_to(t_ms)
            metrics += job.outbox_metrics
            acks += job.outbox_acks
            job.outbox_metrics, job.outbox_acks = [], []
        metrics.sort(key=lambda m: m.batch_end_ms)
        return metrics, acks

    def deliver(self, control: ControlTuple, t_ms: int) -> None:
        job = self.by_query.get(control.query_id)
        if job is not None:
            job.deliver(control, t_ms)


def simulate(scenario: Scenario, policy: Policy, keep_metrics: bool = True) -> Trace:
    """Run `policy` over `scenario`; `keep_metrics` False leaves the jobs' metrics out of the
    trace (a run of days emits hundreds of thousands)."""
    world = World(scenario)
    trace = Trace(scenario, policy.name)
    for job in world.jobs:
        for series in (trace.units, trace.backlog, trace.waiting):
            series[job.spec.query_id] = []
    tick_ms = int(scenario.tick_s * 1000)
    world.advance_to(scenario.warmup_s * 1000)
    start_ms = scenario.warmup_s * 1000 + tick_ms
    for t_ms in range(start_ms, (scenario.warmup_s + scenario.duration_s) * 1000 + 1, tick_ms):
        metrics, acks = world.advance_to(t_ms)
        if keep_metrics:
            trace.metrics += metrics
        trace.acks += [(t_ms / 1000, a) for a in acks]
        controls = policy.step(metrics, acks, T0_MS + t_ms)
        for control in controls:
            trace.controls.append((t_ms / 1000, control))
            world.deliver(control, t_ms)
        _record(trace, world, t_ms)
    return trace


def _record(trace: Trace, world: World, t_ms: int) -> None:
    trace.times_s.append(t_ms / 1000)
    for job in world.jobs:
        trace.units[job.spec.query_id].append(job.units)
        trace.backlog[job.spec.query_id].append(job.backlog(t_ms))
        trace.waiting[job.spec.query_id].append(job.take_peak_waiting(t_ms))


PolicyFactory = Callable[[], Policy]
