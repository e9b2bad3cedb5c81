"""What the controller remembers about its own actions on one query, as a pure state machine.

Owns the in-flight control tuple, the epochs issued, the cooldown and the scale-down
stabilisation timer. Every transition is a function from the old `ControlState` to a new one;
`loop` holds one per query and applies transitions on sends, acks and timeouts, and `policy`
reads it to gate decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class InFlight:
    """A control tuple sent and not yet answered."""

    control_id: str
    target: int
    epoch: int
    issued_at_ms: int


@dataclass(frozen=True, slots=True)
class ControlState:
    last_epoch_issued: int = 0
    in_flight: InFlight | None = None
    cooldown_until_ms: int = 0
    quiet_since_ms: int | None = None
    """Since when the query has been continuously quiet (scale-down candidate), if it is."""


def next_epoch(state: ControlState, epoch_seen: int) -> int:
    """Above both what the job reports and what we issued: a job rejects non-increasing epochs,
    and the controller may have issued one the job never applied (rejected, timed out)."""
    return max(epoch_seen, state.last_epoch_issued) + 1


def issued(state: ControlState, in_flight: InFlight) -> ControlState:
    return replace(state, in_flight=in_flight, last_epoch_issued=in_flight.epoch,
                   quiet_since_ms=None)


def settled(state: ControlState, now_ms: int, cooldown_s: float) -> ControlState:
    """The in-flight tuple was answered (any outcome) or timed out: start the cooldown.

    A rejected or failed value is not retried right away either: the cooldown gives the job
    time to report metrics under whatever configuration it kept.
    """
    return replace(state, in_flight=None, quiet_since_ms=None,
                   cooldown_until_ms=now_ms + int(cooldown_s * 1000))


def ack_overdue(state: ControlState, now_ms: int, ack_timeout_s: float) -> bool:
    flight = state.in_flight
    return flight is not None and now_ms - flight.issued_at_ms >= ack_timeout_s * 1000


def observed(state: ControlState, quiet: bool, now_ms: int) -> ControlState:
    """Track how long the query has been quiet without a break."""
    if not quiet:
        return state if state.quiet_since_ms is None else replace(state, quiet_since_ms=None)
    if state.quiet_since_ms is None:
        return replace(state, quiet_since_ms=now_ms)
    return state
