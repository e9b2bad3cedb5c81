"""The typed outcomes of the pure core, shared by `model`, `policy`, `topology` and `loop`.

`NotReady` is a normal result (window not full, stabilising after a change), never an
exception. `Hold`, `Scale`, `Shed` and `Recommend` are the policy's verdicts, `Lost` the liveness
check's, `Down` a job's own word that it stopped or halted, `Promote` the failover
decision's; each carries its reason as one readable sentence with the numbers in it and its
figures as data, which `loop` writes to the decision log as-is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.knobs import SHED_FRACTION


@dataclass(frozen=True, slots=True)
class NotReady:
    """Not enough trustworthy data to decide yet."""

    reason: str
    action: str = "not_ready"


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep the current configuration. `action` is 'hold', or 'cannot_help' when the query is
    backlogged but the knob is already at its limit."""

    reason: str
    figures: Mapping[str, float] = field(default_factory=dict)
    action: str = "hold"


@dataclass(frozen=True, slots=True)
class Scale:
    """Change one knob of one query from `current` to `target`."""

    parameter: str
    current: int
    target: int
    reason: str
    figures: Mapping[str, float]
    then: int = 0
    """For an executors request: the knob's value to set as soon as they run (0: none)."""
    batch_cap: int = 0
    """The batch cap (max_offsets_per_trigger) set in the same tuple, so the batches keep their
    records per unit (`QueryModel.batch_cap_at`); 0: left as it is."""

    @property
    def action(self) -> str:
        return "scale_up" if self.target > self.current else "scale_down"


@dataclass(frozen=True, slots=True)
class Shed:
    """Set the share of the records its job marks low priority that a query drops (load
    shedding, `shedding`) from `current` to `target`: raised at the ceiling, lifted as the
    load allows."""

    current: float
    target: float
    reason: str
    figures: Mapping[str, float]
    parameter: str = SHED_FRACTION

    @property
    def action(self) -> str:
        return "shed" if self.target > self.current else "lift_shedding"


@dataclass(frozen=True, slots=True)
class Recommend:
    """Advice the controller cannot carry out with its knob: at the resource limit, throttle
    the producers (or shed load); when the per-batch overhead dominates, raise the batch cap;
    when a query has no standby left, start one (it spawns no processes itself).

    `action` is 'throttle', 'raise_batch_cap' or 'start_standby'; `parameter` and `value` name
    what to change ('producer_rate' in records/s, 'max_offsets_per_trigger' in records per
    batch, 'standby_instances').
    """

    action: str
    parameter: str
    value: float
    reason: str
    figures: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Lost:
    """No metrics from the query for longer than its liveness timeout: the instance is gone
    or hung. The remedy is a restart or failover, never more parallelism."""

    reason: str
    silent_s: float
    timeout_s: float
    figures: Mapping[str, float] = field(default_factory=dict)
    action: str = "lost"


@dataclass(frozen=True, slots=True)
class Down:
    """The active instance says it runs no query: it stopped on purpose (`action` 'stopped';
    not a loss, yet a live standby takes over as after one) or halted, waiting for its
    operator (`action` 'halted': e.g. its input was deleted by retention before it read it;
    a standby on the same checkpoint would halt too, so none is promoted). More parallelism
    cannot help either."""

    reason: str
    instance_id: str
    figures: Mapping[str, float] = field(default_factory=dict)
    action: str = "stopped"


@dataclass(frozen=True, slots=True)
class Promote:
    """The active instance is lost and a standby is alive: make the standby the active one
    (`failover`). `lost_instance` is the instance last heard as active ('' if unknown)."""

    instance_id: str
    lost_instance: str
    reason: str
    figures: Mapping[str, float] = field(default_factory=dict)
    action: str = "failover"


Actuation = Scale | Shed | Promote
"""The verdicts the controller carries out with a control tuple."""
Verdict = NotReady | Hold | Scale | Shed | Recommend | Lost | Down | Promote
