"""The desired state and the registry of the parameters a control tuple may set: the one
carrier of a knob's value and the one place that value is checked.

`DesiredState` holds every knob's value in force and the epoch of the tuple that set them; the
port, the plan and the control protocol alike read it. The registry owns, per parameter: how
its value text is parsed and bounded (`Limits`: the job's settings group `Bounds`, and what the
runtime knows), whether it can be changed in this deployment at all, and whether applying it
needs a restart of the query or only a swap at a batch boundary. The options' starting values
pass the same checks (`start_problems`) as a tuple's value. Pure: no Spark, Kafka or clock.
Readers: the job's settings (`config`, before Spark starts), the control protocol
(`runtime.control`), the port (`runtime.ports`) and the plan (`runtime.query.plan`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from enum import Enum

from schemas import knobs
from streaming_jobs.errors import RequestRefused

Value = int | float | str


@dataclass(frozen=True)
class DesiredState:
    """Every runtime parameter of the job, and the epoch of the tuple that set them."""

    epoch: int
    """Epoch of the last applied (or re-asserted) control tuple; 0 before any."""
    input_parallelism: int
    """Kafka source minPartitions: Spark tasks reading the input per batch."""
    state_partitions: int
    """Partitions of the stateful aggregation."""
    max_offsets_per_trigger: int
    """Batch cap in records (the throttle)."""
    shed_fraction: float
    """Fraction of low-priority input records dropped, counted per batch."""
    udf_version: str
    """Version of the job's swappable function in force (`Job.functions`)."""
    input_topic: str
    output_topic: str
    executors: int
    """Executors requested from the cluster manager; 0 (`NOT_REQUESTED`): none requested, what
    the cluster manager granted stands (always so in local mode)."""
    active_instance: str = ""
    """The instance that runs the query, named by a failover's control tuple; empty until the
    first failover (whichever instance was started with role active runs it)."""

    def value(self, name: str) -> Value:
        value: Value = getattr(self, name)
        return value

    def describe(self, knob: str = "") -> str:
        """'input_parallelism 2, state_partitions 4, …': every parameter in force (the active
        instance once a failover named one); `knob`, the one the job scales with, first."""
        names = [f.name for f in fields(self) if f.name != "epoch"
                 and (f.name != knobs.ACTIVE_INSTANCE or self.active_instance)]
        if knob:
            names.remove(knob)
            names.insert(0, knob)
        return ", ".join(f"{n} {render(self.value(n))}{' (its knob)' if n == knob else ''}"
                         for n in names)

    def changed(self, other: DesiredState) -> tuple[str, ...]:
        """Parameters whose values differ (the epoch is not a parameter)."""
        return tuple(f.name for f in fields(self)
                     if f.name != "epoch" and getattr(self, f.name) != getattr(other, f.name))

    def describe_change(self, new: DesiredState) -> str:
        """'<param> old→new' for each changed parameter, e.g. 'input_parallelism 2→4'."""
        return ", ".join(f"{n} {render(self.value(n))}→{render(new.value(n))}"
                         for n in self.changed(new)) or "no change"


NOT_REQUESTED = 0
"""`DesiredState.executors` before any request: no control tuple may ask for it."""


def is_request(name: str, value: object) -> bool:
    """Whether a desired value is one to check against the parameter's bounds: an executor
    count of `NOT_REQUESTED` is none at all."""
    return not (name == knobs.EXECUTORS and value == NOT_REQUESTED)


def render(value: Value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Bounds:
    """What bounds a knob's value and a record's size."""

    max_offsets_per_trigger_limit: int = 100_000
    """Highest batch cap a control tuple may set (throttle upper bound)."""

    max_state_partitions: int = 64
    """Highest state partition count a control tuple may set."""

    max_executors: int = 64
    """Highest executor count a control tuple may request on a cluster manager."""

    max_shed_fraction: float = 0.5
    """Highest shed fraction a control tuple may set; never all of the input."""

    max_record_bytes: int = 1_000_000
    """The largest record the job writes, in bytes with its framing: an output row (key,
    value) or a dead letter (payload, headers). It is the producers' message.max.bytes, and
    may not exceed the output and dead-letter topics' max.message.bytes (checked at start).
    A row over it, or over its topic's limit, goes to the dead-letter topic; a dead letter
    over it keeps as much of its payload as fits. Input records may be as large as their
    topic takes."""


@dataclass(frozen=True)
class Limits:
    """What bounds a parameter's value in this job, as of the tuple being evaluated: the
    job's settings (`bounds`) and what the runtime knows."""

    task_slots: int
    udf_versions: tuple[str, ...]
    master: str
    """Spark master URL ('local[16]', 'spark://host:7077', ...)."""
    bounds: Bounds
    existing_topics: frozenset[str] = frozenset()
    """Topics known to exist; the control loop fills it for topic parameters."""
    unsupported: tuple[tuple[str, str], ...] = ()
    """(parameter, reason) for parameters the job or its checkpoint rules out (a stateless
    job's state partitions, a job without function versions, a checkpoint from before named
    sources)."""

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    @property
    def task_slots_bound(self) -> str:
        """What sets `task_slots`, in the words of the options."""
        return "task_slots" if self.local else "max_executors x executor_cores on a cluster"


class Apply(Enum):
    """How a change takes effect at the batch boundary."""

    RESTART = "restart"
    """Quiesce, stop, restart the query from its checkpoint with the new plan."""
    SWAP = "swap"
    """Hold new batches at the gate, swap a setting the running query reads per batch."""
    ROLE = "role"
    """Promote this instance (start the query from the shared checkpoint) or step it down
    (stop the query, become a standby): `standby`."""


class BadValue(RequestRefused, ValueError):
    """The value text cannot be parsed or is out of bounds; the message says what is allowed."""


Parser = Callable[[str, Limits], Value]


@dataclass(frozen=True)
class Parameter:
    name: str
    parse: Parser
    apply: Apply
    availability: Callable[[Limits], str | None] = lambda _limits: None
    """Why this parameter cannot be changed in this deployment, or None."""

    def unavailable(self, limits: Limits) -> str | None:
        """Why it cannot be changed here: the deployment (`availability`) or the job and its
        checkpoint (`Limits.unsupported`); None when it can."""
        return self.availability(limits) or dict(limits.unsupported).get(self.name)


def _int_in(low: Callable[[Limits], int], high: Callable[[Limits], int],
            bound: Callable[[Limits], str]) -> Parser:
    def parse(text: str, limits: Limits) -> int:
        lo, hi = low(limits), high(limits)
        text = text.strip()
        if not re.fullmatch(r"[+-]?\d+", text) or not lo <= int(text) <= hi:
            raise BadValue(f"expected an integer in [{lo}, {hi}] ({bound(limits)})")
        return int(text)
    return parse


def _named(bound: str) -> Callable[[Limits], str]:
    return lambda _limits: bound


def _fraction(text: str, limits: Limits) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not 0 <= value <= limits.bounds.max_shed_fraction:  # False for NaN
        raise BadValue(f"expected a number in [0, {limits.bounds.max_shed_fraction:g}] "
                       "(max_shed_fraction)")
    return value


def _udf(text: str, limits: Limits) -> str:
    if text.strip() not in limits.udf_versions:
        raise BadValue(f"expected a registered version: {', '.join(limits.udf_versions)}")
    return text.strip()


_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topic(text: str, limits: Limits) -> str:
    name = text.strip()
    if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise BadValue("expected a Kafka topic name (1-249 of [A-Za-z0-9._-])")
    if name not in limits.existing_topics:
        raise BadValue(f"topic {name!r} does not exist; create it first")
    return name


_INSTANCE_ID = re.compile(r"[A-Za-z0-9._:@-]{1,200}")


def _instance(text: str, _limits: Limits) -> str:
    name = text.strip()
    if not _INSTANCE_ID.fullmatch(name):
        raise BadValue("expected an instance id (1-200 of [A-Za-z0-9._:@-])")
    return name


def _cluster_only(limits: Limits) -> str | None:
    if limits.local:
        return (f"executors can only be changed on a cluster manager; this job runs "
                f"{limits.master}")
    return None


def _one(_limits: Limits) -> int:
    return 1


REGISTRY: dict[str, Parameter] = {p.name: p for p in (
    Parameter(knobs.INPUT_PARALLELISM,
              _int_in(_one, lambda lim: lim.task_slots, lambda lim: lim.task_slots_bound),
              Apply.RESTART),
    Parameter(knobs.MAX_OFFSETS_PER_TRIGGER,
              _int_in(_one, lambda lim: lim.bounds.max_offsets_per_trigger_limit,
                      _named("max_offsets_per_trigger_limit")), Apply.RESTART),
    Parameter(knobs.SHED_FRACTION, _fraction, Apply.SWAP),
    Parameter(knobs.UDF_VERSION, _udf, Apply.SWAP),
    Parameter(knobs.OUTPUT_TOPIC, _topic, Apply.SWAP),
    Parameter(knobs.EXECUTORS,
              _int_in(_one, lambda lim: lim.bounds.max_executors, _named("max_executors")),
              Apply.SWAP, _cluster_only),
    Parameter(knobs.STATE_PARTITIONS,
              _int_in(_one, lambda lim: lim.bounds.max_state_partitions,
                      _named("max_state_partitions")),
              Apply.RESTART),
    Parameter(knobs.INPUT_TOPIC, _topic, Apply.RESTART),
    Parameter(knobs.ACTIVE_INSTANCE, _instance, Apply.ROLE),
)}
"""Every parameter a control tuple may name. Those read per batch swap at a batch boundary:
the shed fraction and the function version (the tasks read them from the batch's local
properties, `streaming_jobs.per_batch`), the sink's topic and the executor request (driver
side). Those fixed in the plan Spark runs restart the query: the source's `minPartitions`
(input parallelism) and its `maxOffsetsPerTrigger` (the Kafka source reads both once, when
the query starts), the number of state partitions (fixed in the checkpoint) and the input
topic (the source's subscription). Which instance runs the query is one value per query
(every instance reads the same tuple), so a failover is desired state like the rest:
idempotent, re-assertable, and stale below the epoch in force."""

READ_BY_TASKS = frozenset({knobs.SHED_FRACTION, knobs.UDF_VERSION})
"""Swapped values the Spark tasks run (the job's code: its function, its `low_priority`):
whether they work is only known once a batch has run with them."""

ROLE_PARAMETER = knobs.ACTIVE_INSTANCE

TOPIC_PARAMETERS = knobs.TOPICS


UNCHECKED_AT_START = TOPIC_PARAMETERS | {ROLE_PARAMETER}
"""Parameters whose starting value is not checked: the topics' existence shows when they are
used, and nobody is named active before a failover (values that request nothing,
`is_request`, are not checked either)."""


def start_problems(state: DesiredState, limits: Limits,
                   unknown: frozenset[str] = frozenset()) -> list[str]:
    """What is wrong with the starting values in `state`, each checked as a control tuple's
    would be: out of bounds, or set where this deployment cannot change it. Parameters the job
    or its checkpoint rule out keep their value unread; `unknown` are not known yet (a
    function version before the job is loaded)."""
    problems = []
    for name, parameter in REGISTRY.items():
        value = state.value(name)
        if (name in UNCHECKED_AT_START | unknown or not is_request(name, value)
                or name in dict(limits.unsupported)):
            continue
        reason = parameter.availability(limits)
        try:
            if reason is None:
                parameter.parse(render(value), limits)
        except BadValue as exc:
            reason = str(exc)
        if reason is not None:
            problems.append(f"{name}={render(value)}: {reason}")
    return problems


def apply_path(old: DesiredState, new: DesiredState) -> Apply:
    """ROLE if the active instance changes, else RESTART if any changed parameter needs it,
    else SWAP."""
    paths = {REGISTRY[n].apply for n in old.changed(new)}
    for path in (Apply.ROLE, Apply.RESTART):
        if path in paths:
            return path
    return Apply.SWAP


def with_value(state: DesiredState, name: str, value: Value) -> DesiredState:
    """`state` with one parameter set."""
    return replace(state, **{name: value})  # type: ignore[arg-type]  # registry parsers type values
