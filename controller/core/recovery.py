"""A restarted controller's memory, rebuilt from what it wrote to Kafka (pure).

Owns the fold from history — the control tuples it sent, the jobs' acks, its decision log —
to one `ControlState` per query, so that after a restart it neither repeats an action (the
cooldown and an unanswered tuple are restored: a failover still waiting for the promoted
instance's ack is waited for, not decided again) nor contradicts one (epochs continue above
every epoch it issued; a job rejects anything lower anyway). What is not restored, and why:
the metrics windows (the metrics consumer reads the last window back from the topic), the
memory of ineffective scale-ups (it is re-learned from the next scale-up's measured effect)
and a knob change still to follow applied executors (the query is sized afresh after the
cooldown, with the slots its metrics then show).
What the model carries between evaluations (`model.Remembered`: μ at each size a query ran, the
fitted per-batch cost, the batch cap's records per unit) is rebuilt from the figures of its
decisions over a longer span (`recorded_memories`).
Neighbours: `kafka.history` reads the topics; `app` seeds the loop with the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from controller.core.model import Remembered
from controller.core.scaling import remember, tells_size
from controller.core.state import (
    EXECUTORS_REGISTER_WAIT_S,
    ControlState,
    EffectCheck,
    InFlight,
    ack_due_ms,
)
from schemas import Ack, ControlTuple, Decision, Outcome
from schemas.knobs import ACTIVE_INSTANCE, EXECUTORS


@dataclass(frozen=True)
class History:
    """What the controller finds on its topics at start-up."""

    tuples: tuple[ControlTuple, ...]
    acks: tuple[Ack, ...]
    decisions: tuple[Decision, ...]

    def of(self, queries: Callable[[str], bool]) -> History:
        """Only what concerns the queries `queries` accepts (those of the shards taken
        over)."""
        return History(tuple(t for t in self.tuples if queries(t.query_id)),
                       tuple(a for a in self.acks if queries(a.query_id)),
                       tuple(d for d in self.decisions if queries(d.query_id)))


@dataclass(frozen=True)
class Recovered:
    states: dict[str, ControlState]
    summary: tuple[str, ...]
    """One readable line per recovered query, for the start-up log."""
    promoted: dict[str, str] = field(default_factory=dict)
    """Per query, the instance its last tuple promoted, when that promotion was applied (the
    loop then counts its standbys as if it had seen the ack)."""
    remembered: dict[str, Remembered] = field(default_factory=dict)
    """Per query, what its decisions' figures say of its model (`recorded_memories`)."""


def recover(history: History, now_ms: int, *, issuer: str, cooldown_s: float,
            ack_timeout_s: float) -> Recovered:
    """Per query: the epochs issued, the tuple still in flight or the cooldown running."""
    own = [t for t in history.tuples if t.issuer == issuer]
    decisions = {d.control_id: d for d in history.decisions if d.control_id}
    states: dict[str, ControlState] = {}
    summary: list[str] = []
    promoted: dict[str, str] = {}
    for query_id in sorted({t.query_id for t in own}):
        latest = max((t for t in own if t.query_id == query_id), key=lambda t: t.epoch)
        ack = answer(latest, history.acks)
        state, line = _query_state(latest, ack, decisions.get(latest.control_id), now_ms,
                                   cooldown_s=cooldown_s, ack_timeout_s=ack_timeout_s)
        states[query_id] = state
        summary.append(f"{query_id}: {line}")
        if (latest.parameter == ACTIVE_INSTANCE and ack is not None
                and ack.outcome is Outcome.APPLIED):
            promoted[query_id] = latest.value
    return Recovered(states, tuple(summary), promoted)


def recorded_memories(decisions: tuple[Decision, ...]) -> dict[str, Remembered]:
    """Per query, from its decisions' figures, oldest first: μ at each size (the newest per
    size, and only a μ that is the size's own, as `Remembered.after` keeps it),
    the newest fitted cost and the batch cap's newest records per unit."""
    found: dict[str, Remembered] = {}
    for d in sorted(decisions, key=lambda d: d.decided_at_ms):
        f, memory = d.figures, found.get(d.query_id, Remembered())
        fitted = f.get("overhead_fitted", 0.0) == 1.0
        units, rate = int(f.get("units", 0)), f.get("processing_rate_per_unit", 0.0)
        # A remembered c may be exactly 0; a c above 0 unfitted is a remembered one in a log
        # written before the figure said so.
        remembered = f.get("overhead_remembered", 0.0) == 1.0 or f.get("batch_overhead_s", 0.0) > 0
        source = "fit" if fitted else "remembered" if remembered else "assumed_zero"
        if (units > 0 and f.get("rate_samples", 0) > 0
                and f.get("rate_measured_capped", 0.0) != 1.0
                and tells_size(source, rate, f.get("useful_share", 0.0))):
            memory = replace(memory, sizes=tuple(remember(dict(memory.sizes), units,
                                                          rate).items()))
        if fitted:
            memory = replace(memory, overhead_s=f.get("batch_overhead_s", 0.0))
        if f.get("batch_cap_per_unit", 0.0) > 0:
            memory = replace(memory, batch_cap_per_unit=f["batch_cap_per_unit"])
        if memory != Remembered():
            found[d.query_id] = memory
    return found


def answer(t: ControlTuple, acks: tuple[Ack, ...]) -> Ack | None:
    """The ack that answers `t`: for a failover the promoted instance's (an active that stepped
    down acks the same tuple too), for anything else the tuple's only ack."""
    return next((a for a in reversed(acks) if a.control_id == t.control_id
                 and (t.parameter != ACTIVE_INSTANCE or a.instance_id == t.value)), None)


def _query_state(latest: ControlTuple, ack: Ack | None, decision: Decision | None, now_ms: int,
                 *, cooldown_s: float, ack_timeout_s: float) -> tuple[ControlState, str]:
    head = (f"last tuple {latest.parameter}={latest.value} at epoch {latest.epoch} "
            f"({latest.control_id})")
    cooldown_ms = int(cooldown_s * 1000)
    if ack is None:
        overdue_at = ack_due_ms(latest.parameter, latest.issued_at_ms, ack_timeout_s)
        if now_ms < overdue_at:
            flight = _in_flight(latest, decision)
            return (ControlState(last_epoch_issued=latest.epoch, in_flight=flight),
                    f"{head} is unanswered; waiting for its ack until the timeout")
        # Timed out while nobody watched: settle as the loop would have, at the timeout.
        return (ControlState(last_epoch_issued=latest.epoch, settled_at_ms=overdue_at,
                             cooldown_until_ms=overdue_at + cooldown_ms),
                f"{head} was never answered; treated as timed out")
    state = ControlState(last_epoch_issued=latest.epoch, settled_at_ms=ack.acked_at_ms,
                         cooldown_until_ms=ack.acked_at_ms + cooldown_ms,
                         effect_check=_effect_check(ack, decision))
    left_s = max(0, state.cooldown_until_ms - now_ms) / 1000
    return state, f"{head} was {ack.outcome.value.lower()}; cooldown {left_s:.0f} s left"


def _in_flight(t: ControlTuple, decision: Decision | None) -> InFlight:
    if t.parameter == ACTIVE_INSTANCE:  # a failover: only the promoted instance's ack counts
        return InFlight(control_id=t.control_id, target=0, epoch=t.epoch,
                        issued_at_ms=t.issued_at_ms, parameter=ACTIVE_INSTANCE,
                        instance=t.value)
    figures = decision.figures if decision is not None else {}
    return InFlight(
        control_id=t.control_id, target=_int(t.value), epoch=t.epoch,
        issued_at_ms=t.issued_at_ms, parameter=t.parameter,
        current=_int(decision.current_value) if decision is not None else 0,
        rate_per_unit=figures.get("processing_rate_per_unit", 0.0),
        batch_overhead_s=figures.get("batch_overhead_s", 0.0),
        batch_cap=int(figures.get("batch_cap", 0.0)))


def _effect_check(ack: Ack, decision: Decision | None) -> EffectCheck | None:
    """An applied scale-up's effect is still to be measured, as if the loop had seen the ack
    (not for executors: `state.applied`)."""
    if (decision is None or ack.outcome is not Outcome.APPLIED
            or decision.parameter == EXECUTORS):
        return None
    current, target = _int(decision.current_value), _int(decision.target_value)
    rate = decision.figures.get("processing_rate_per_unit", 0.0)
    if target <= current or rate <= 0:
        return None
    return EffectCheck(current, target, rate, decision.figures.get("batch_overhead_s", 0.0),
                       int(decision.figures.get("batch_cap", 0.0)))


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def history_span_s(*, ack_timeout_s: float, cooldown_s: float) -> float:
    """How far back acks and decisions are read. A tuple issued earlier than its ack's
    deadline (`ack_due_ms`: an `executors` tuple's is the longest) plus the cooldown has been
    answered or timed out, and its cooldown is over, so its ack changes nothing today; twice
    that covers a tuple issued right at the edge."""
    return 2 * (ack_timeout_s + EXECUTORS_REGISTER_WAIT_S + cooldown_s)


def resumed(watched: ControlState, recovered: ControlState | None) -> ControlState:
    """A new leader's state for one query: the actions earlier leaders took (epochs, the tuple
    in flight, the cooldown, the effect still to check), from their history, with what this
    instance saw for itself while it followed (how long the query has been quiet since the
    last action, the scale-ups it judged ineffective)."""
    base = recovered if recovered is not None else ControlState()
    quiet = watched.quiet_since_ms
    if base.in_flight is not None or (quiet is not None and quiet < base.settled_at_ms):
        quiet = None
    return replace(base, quiet_since_ms=quiet,
                   ineffective=base.ineffective or watched.ineffective)


def following(state: ControlState) -> ControlState:
    """What a deposed leader keeps of a query's state: what it sees, not what it did (the
    next leader's history is the record of that)."""
    return ControlState(quiet_since_ms=state.quiet_since_ms, ineffective=state.ineffective)
