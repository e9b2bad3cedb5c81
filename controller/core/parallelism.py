"""Which knob scales a query, how many of its units run at once, and what bounds it.

Owns the seam between what a job reports and what the policy sizes. The job's plan names the
knob (`TaskMetrics.scaling_parameter`) because only the plan knows which stage holds its
expensive work; the controller sizes that knob and never guesses:

- `input_parallelism` (the Kafka source's minPartitions): the work runs in the source tasks.
  A unit is a source task running at once: at least one per Kafka partition (minPartitions
  is a minimum), at most the task slots (beyond them tasks queue instead of running).
- `state_partitions` (the stateful operator's partitions, i.e. the shuffle's): the work runs
  in the stateful operator, one task per state partition. A unit is a state partition running
  at once: at most the task slots. Kafka's partitions bound nothing here (the shuffle spreads
  keys over the state partitions), and neither do they say anything about key skew.
- `executors` (on a cluster manager only) sizes nothing itself: it is where task slots come
  from. When the units a query needs exceed its task slots and the job may take more
  executors, the remedy is ceil(units / cores) executors, at most the job's `max_executors`,
  and the knob follows as soon as their ack says they run (`ExecutorRequest.then`, no
  cooldown: more executors change neither λ nor μ, and the samples stay valid,
  `window.QueryWindow.carry_to`). Executors first, because an executor request is a swap at a
  batch boundary while a knob change restarts the query: the knob then reaches its target in
  one restart, not two (one tuple is in flight per query). On a shared cluster whose status
  the controller reads, the request is cut to the cores its division grants the query
  (`within_cluster`, `cluster`); granted none, the task slots are the ceiling.

Records written before `scaling_parameter` existed read as `input_parallelism` in local mode
(the Avro defaults), which is what every job was then. Pure. Neighbours: `model` (a sample's
knob and units), `policy` (bounds, the executor request), `topology` and `judgement` (units
at another value, through `QueryModel.units_at`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller.settings import PolicySettings
from schemas import TaskMetrics
from schemas.knobs import INPUT_PARALLELISM, STATE_PARTITIONS

if TYPE_CHECKING:
    from controller.core.model import QueryModel
    from controller.core.state import ControlState

KNOBS = (INPUT_PARALLELISM, STATE_PARTITIONS)
"""The knobs this controller can size."""


def problem(sample: TaskMetrics) -> str | None:
    """Why the knob the job names cannot be sized, or None."""
    knob = sample.scaling_parameter
    if knob not in KNOBS:
        return (f"the job names {knob!r} as its scaling parameter, which this controller "
                f"cannot size (it knows {', '.join(KNOBS)}); upgrade the controller")
    if knob == STATE_PARTITIONS and sample.state_partitions <= 0:
        return ("the job scales by its state partitions but reports none (a stateless plan "
                "cannot); fix its plan's scaling_parameter")
    return None


def value(sample: TaskMetrics) -> int:
    """The knob's value in force for the sample's batch."""
    return (sample.state_partitions if sample.scaling_parameter == STATE_PARTITIONS
            else sample.input_parallelism)


def units(knob: str, setting: int, source_partitions: int, task_slots: int) -> int:
    """Tasks of the expensive stage that run at once with the knob at `setting`."""
    floor = source_partitions if knob == INPUT_PARALLELISM else 1
    running = max(setting, floor, 1)
    return min(running, task_slots) if task_slots > 0 else running


def job_max(sample: TaskMetrics) -> int:
    """The job's own ceiling for the knob (0: none reported; the task slots bound it then):
    its max_state_partitions, or for the input parallelism on a cluster every executor it may
    request times their cores (locally its task slots, reported as such)."""
    if sample.scaling_parameter == STATE_PARTITIONS:
        return sample.max_state_partitions
    return sample.max_executors * sample.executor_cores


def _job_max_name(knob: str) -> str:
    return ("the job's max_state_partitions" if knob == STATE_PARTITIONS
            else "the job's max_executors × executor_cores")


@dataclass(frozen=True, slots=True)
class KnobRange:
    low: int
    high: int
    high_set_by: str
    """What caps the knob ('task slots', 'max_parallelism', the job's own maximum or 'an
    ineffective scale-up'), for the reason sentence."""


INEFFECTIVE = "an ineffective scale-up"


def knob_range(model: QueryModel, settings: PolicySettings, state: ControlState | None = None,
               now_ms: int = 0) -> KnobRange:
    """The knob's range. Input parallelism below the topic's partition count changes nothing
    (Spark's minPartitions is a minimum); either knob above the task slots only queues tasks.
    When the floor exceeds the ceiling the floor wins: the knob cannot go below it anyway."""
    low = max(settings.min_parallelism,
              model.source_partitions if model.knob == INPUT_PARALLELISM else 1)
    high, set_by = _ceiling(model, settings, state, now_ms, model.task_slots)
    return KnobRange(low, max(high, low), set_by)


def _ceiling(model: QueryModel, settings: PolicySettings, state: ControlState | None,
             now_ms: int, task_slots: int) -> tuple[int, str]:
    """The tightest cap with `task_slots` (0: the slots cap nothing). A remembered ineffective
    scale-up caps the knob at the level where more stopped helping."""
    high, set_by = settings.max_parallelism, "max_parallelism"
    for cap, name in ((model.job_max, _job_max_name(model.knob)),
                      (task_slots, _slots_name(model))):
        if 0 < cap < high:
            high, set_by = cap, name
    memory = state.ineffective if state is not None else None
    if memory is not None and now_ms < memory.until_ms:
        ceiling = max(memory.current, model.parallelism)
        if ceiling < high:
            high, set_by = ceiling, INEFFECTIVE
    return high, set_by


def _slots_name(model: QueryModel) -> str:
    if on_cluster(model) and running_executors(model) >= model.max_executors:
        return (f"task slots ({model.max_executors} executors × {model.executor_cores} "
                "cores, the job's max_executors)")
    grant = model.cluster_grant
    if on_cluster(model) and grant is not None and grant.cores < model.executor_cores:
        return (f"task slots ({running_executors(model)} executors × {model.executor_cores} "
                f"cores; no room for another executor: {grant.note})")
    return "task slots"


def on_cluster(model: QueryModel) -> bool:
    """Whether the job can take an `executors` tuple (it reports their cores and maximum)."""
    return model.executor_cores > 0 and model.max_executors > 0


def running_executors(model: QueryModel) -> int:
    """Executors running now: the task slots are their cores."""
    return model.task_slots // model.executor_cores if model.executor_cores > 0 else 0


def executors_kept(model: QueryModel, units: int) -> int | None:
    """The executors whose slots hold `units`, when the query runs more: those to keep once
    the rest go back to the cluster. None in local mode or with none spare."""
    if not on_cluster(model):
        return None
    kept = max(1, math.ceil(units / model.executor_cores))
    return kept if kept < running_executors(model) else None


@dataclass(frozen=True, slots=True)
class ExecutorRequest:
    executors: int
    then: int
    """The knob's value once they run: the units wanted, as far as their slots hold them."""


CORES_WANTED = "cluster_cores_wanted"
"""The figure of a verdict that names the cores its query wants beyond those it runs, before
the cluster's room cut them: the loop divides the free cores by it (`cluster`)."""


def executors_wanted(model: QueryModel, wanted: int, settings: PolicySettings,
                     state: ControlState | None, now_ms: int) -> ExecutorRequest | None:
    """Executors to ask for so that `wanted` units (as far as every other cap allows) find
    task slots; None in local mode, when the slots are enough, or at the job's maximum. The
    cluster's room does not cut it (`within_cluster` does)."""
    if not on_cluster(model):
        return None
    room, _ = _ceiling(model, settings, state, now_ms, task_slots=0)
    needed = min(wanted, room)
    if needed <= model.task_slots:
        return None
    executors = min(math.ceil(needed / model.executor_cores), model.max_executors)
    if executors <= running_executors(model):
        return None
    return ExecutorRequest(executors, min(needed, executors * model.executor_cores))


def cores_wanted(model: QueryModel, request: ExecutorRequest) -> int:
    """Cores `request` adds to those the query runs."""
    return (request.executors - running_executors(model)) * model.executor_cores


def within_cluster(model: QueryModel, request: ExecutorRequest) -> ExecutorRequest | None:
    """`request` cut to the cores the cluster's division grants the query (`cluster`); None
    when it grants none. Without the cluster's status nothing cuts it."""
    grant = model.cluster_grant
    if grant is None or grant.cores >= cores_wanted(model, request):
        return request
    executors = running_executors(model) + grant.cores // model.executor_cores
    if executors <= running_executors(model):
        return None
    return ExecutorRequest(executors, min(request.then, executors * model.executor_cores))
