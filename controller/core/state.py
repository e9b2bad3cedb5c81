"""What the controller remembers about its own actions on one query, as a pure state machine.

Owns the in-flight control tuple, the epochs issued, the cooldown, the scale-down
stabilisation timer, and the memory of scale-ups that did not help (`judgement` decides).
Every transition is a function from the old `ControlState` to a new one;
`loop` holds one per query and applies transitions on sends, acks and timeouts, and `policy`
reads it to gate decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from schemas.knobs import ACTIVE_INSTANCE, EXECUTORS, INPUT_PARALLELISM, SCALING

EXECUTORS_REGISTER_WAIT_S = 90.0
"""The most a job waits, once it applied an `executors` tuple, for the executors to register
before it acks (docs/control-tuples.md; the runtime's `EXECUTOR_WAIT_S`, which a unit test ties
to this): its ack is awaited this long beyond the ack timeout."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """A control tuple sent and not yet answered."""

    control_id: str
    target: int
    epoch: int
    issued_at_ms: int
    current: int = 0
    """The parameter's value when it was sent."""
    rate_per_unit: float = 0.0
    """μ the decision was sized with (records/s per unit)."""
    batch_overhead_s: float = 0.0
    """c the decision was sized with."""
    batch_cap: int = 0
    """N in force when it was sent (0: unbounded or unknown)."""
    parameter: str = INPUT_PARALLELISM
    """What the tuple sets: a scaling (the query's knob, or executors, to `target`) or a
    failover (`instance`)."""
    instance: str = ""
    """For a failover, the instance promoted: only its ack answers the tuple."""
    then: int = 0
    """For executors, the knob's value that follows once they run (`Scale.then`)."""
    text: str = ""
    """The value the tuple carries when it is no count (a shed fraction, '0.25')."""

    @property
    def value(self) -> str:
        """The value the tuple carries."""
        if not self.scaling:
            return self.instance
        return self.text or str(self.target)

    @property
    def scaling(self) -> bool:
        return self.parameter != ACTIVE_INSTANCE


@dataclass(frozen=True, slots=True)
class EffectCheck:
    """An applied scale-up whose effect on capacity is still to be measured. It keeps μ and c
    rather than capacities: the batch cap may only become known after the change (the first
    batch cut by it), and before/predicted/measured must be compared under each size's cap:
    the old size's as it was in force, the new one's as the model gives it
    (`QueryModel.batch_cap_at`)."""

    current: int
    target: int
    rate_per_unit: float
    batch_overhead_s: float
    batch_cap: int = 0
    """N in force at `current` (0: unknown; the model's cap at that size is taken)."""


@dataclass(frozen=True, slots=True)
class Ineffective:
    """A scale-up that raised capacity far less than predicted; not repeated until
    `until_ms`. `current` is the level where more parallelism stopped helping."""

    current: int
    target: int
    measured_gain: float
    predicted_gain: float
    until_ms: int


@dataclass(frozen=True, slots=True)
class ControlState:
    last_epoch_issued: int = 0
    in_flight: InFlight | None = None
    cooldown_until_ms: int = 0
    quiet_since_ms: int | None = None
    """Since when the query has been continuously quiet (scale-down candidate), if it is."""
    spare_since_ms: int | None = None
    """Since when the query has run unbacklogged on fewer executors than it holds, if it has
    (`spared`): the policy releases the rest once that has lasted a stabilisation period."""
    quiet_carried_ms: int | None = None
    """From a scale-down's send until the first model at its new size: when the quiet it
    served began. The load stayed as low through the change, so the next step down needs a
    quiet model at the new size (after the cooldown), not a second stabilisation period; the
    first model that is not quiet drops it."""
    settled_at_ms: int = 0
    """When the last actuation ended (a restarting job is silent for a while after it)."""
    effect_check: EffectCheck | None = None
    ineffective: Ineffective | None = None
    follow_up: int = 0
    """The knob's value to set next, at once: the executors asked for with it run. It skips
    the cooldown, which waits for metrics of a new configuration, and more executors change
    neither λ nor μ (0: none)."""
    change_s: float | None = None
    """How long the query's last applied resizing of its knob took, from the tuple's send to
    its ack (the job warms up, quiesces, restarts, commits a first batch): what arrives
    meanwhile beyond the old size's capacity waits too (`policy`). None: none applied yet."""


def next_epoch(state: ControlState, epoch_seen: int) -> int:
    """Above both what the job reports and what we issued: a job rejects non-increasing epochs,
    and the controller may have issued one the job never applied (rejected, timed out)."""
    return max(epoch_seen, state.last_epoch_issued) + 1


def issued(state: ControlState, in_flight: InFlight) -> ControlState:
    steps_down = in_flight.scaling and in_flight.target < in_flight.current
    return replace(state, in_flight=in_flight, last_epoch_issued=in_flight.epoch,
                   quiet_since_ms=None, spare_since_ms=None, follow_up=0,
                   quiet_carried_ms=state.quiet_since_ms if steps_down else None)


def settled(state: ControlState, now_ms: int, cooldown_s: float) -> ControlState:
    """The in-flight tuple was answered (any outcome) or timed out: start the cooldown.

    A rejected or failed value is not retried right away either: the cooldown gives the job
    time to report metrics under whatever configuration it kept.
    """
    return replace(state, in_flight=None, quiet_since_ms=None, settled_at_ms=now_ms,
                   cooldown_until_ms=now_ms + int(cooldown_s * 1000), follow_up=0,
                   quiet_carried_ms=None)


def applied(state: ControlState, now_ms: int, cooldown_s: float) -> ControlState:
    """The in-flight tuple was applied: settle, and for a scale-up of the knob measure its
    effect later; after more executors, the knob follows (more executors raise capacity only
    once it does, so their effect is not measured)."""
    flight = state.in_flight
    after = replace(settled(state, now_ms, cooldown_s), quiet_carried_ms=state.quiet_carried_ms)
    if flight is not None and flight.parameter == EXECUTORS:
        return replace(after, effect_check=None, follow_up=flight.then)
    if flight is not None and flight.parameter in SCALING and flight.rate_per_unit > 0:
        after = replace(after, change_s=(now_ms - flight.issued_at_ms) / 1000)
    if flight is None or flight.target <= flight.current or flight.rate_per_unit <= 0:
        return replace(after, effect_check=None)
    return replace(after, effect_check=EffectCheck(
        flight.current, flight.target, flight.rate_per_unit, flight.batch_overhead_s,
        flight.batch_cap))


def ack_overdue(state: ControlState, now_ms: int, ack_timeout_s: float) -> bool:
    flight = state.in_flight
    return flight is not None and now_ms >= ack_due_ms(flight.parameter, flight.issued_at_ms,
                                                       ack_timeout_s)


def ack_due_ms(parameter: str, issued_at_ms: int, ack_timeout_s: float) -> int:
    """When a tuple's ack is overdue: the ack timeout after it was issued, and for an
    `executors` tuple the job's wait for them to register beyond it (an ack after its own
    wait was otherwise ignored, and the knob that follows them was not set)."""
    wait_s = ack_timeout_s + (EXECUTORS_REGISTER_WAIT_S if parameter == EXECUTORS else 0.0)
    return issued_at_ms + int(wait_s * 1000)


def observed(state: ControlState, quiet: bool | None, now_ms: int) -> ControlState:
    """Track how long the query has been quiet without a break: `quiet` is what its model
    says, None when there is no model (a gap in the data, or the window refilling after a
    change). A gap restarts the timer, but keeps what a scale-down carried over.

    While a tuple is in flight the model is of the configuration it replaces (the job reports
    that one until its query has restarted, seconds later): it counts for nothing. Counted, a
    quiet model there spent a scale-down's carried quiet on the old size, and the ack then
    dropped it."""
    if state.in_flight is not None:
        return state
    if quiet is None:
        return state if state.quiet_since_ms is None else replace(state, quiet_since_ms=None)
    if not quiet:
        return replace(state, quiet_since_ms=None, quiet_carried_ms=None)
    if state.quiet_since_ms is None:
        carried = state.quiet_carried_ms
        return replace(state, quiet_since_ms=now_ms if carried is None else carried,
                       quiet_carried_ms=None)
    return state


def spared(state: ControlState, spare: bool, now_ms: int) -> ControlState:
    """Track how long the query has run unbacklogged on fewer executors than it holds
    (`spare`, `policy.executors_to_keep`), as `observed` tracks the quiet: a model of the
    configuration a tuple in flight replaces counts for nothing, a break restarts it."""
    if state.in_flight is not None:
        return state
    if not spare:
        return state if state.spare_since_ms is None else replace(state, spare_since_ms=None)
    return state if state.spare_since_ms is not None else replace(state, spare_since_ms=now_ms)
