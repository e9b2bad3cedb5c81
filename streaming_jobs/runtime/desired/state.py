"""`DesiredState`: the knobs in force and their epoch, read by the port, the plan and the
control protocol alike (see the package)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from schemas import knobs

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


