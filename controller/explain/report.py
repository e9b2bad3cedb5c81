"""How decisions and status read: log lines and `schemas.Decision` records.

Owns the text an operator sees on stdout and the audit record written for each decision
(scalings; advice, "cannot help", lost, stopped and halted queries; actuation outcomes). Pure
formatting; `loop` does the logging and the writing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from controller.core.model import QueryModel
from controller.core.results import (
    Actuation,
    Down,
    Hold,
    Lost,
    Recommend,
    Verdict,
)
from controller.core.shards import describe, taken_figures
from controller.core.wording import num, pct
from schemas import Decision
from schemas.records import TAKEOVER


@dataclass(frozen=True, slots=True)
class TupleChange:
    """What a verdict's control tuple sets: its parameter, from which value to which."""

    parameter: str
    current: str
    target: str


def decision_line(query_id: str, verdict: Actuation, change: TupleChange, *,
                  epoch: int | None, control_id: str | None, dry_run: bool) -> str:
    sent = "dry run, not sent" if dry_run else f"epoch {epoch}, control {control_id}"
    return (f"{query_id}: {verdict.action} {change.parameter} {change.current or '?'} → "
            f"{change.target} ({sent}): {verdict.reason}")


def status_line(query_id: str, model: QueryModel | None, verdict: Verdict | None) -> str:
    said = f"{verdict.action}: {verdict.reason}" if verdict is not None else "no verdict yet"
    if model is None:
        return f"{query_id}: {said}"
    return (f"{query_id}: λ {num(model.arrival_rate)}/s, capacity {num(model.capacity)}/s, "
            f"backlog {num(model.backlog_records)} records "
            f"({num(model.backlog_trend_records_per_s)}/s), utilisation "
            f"{pct(model.utilisation)}, busy {pct(model.busy_ratio)}, overhead "
            f"{num(model.batch_overhead_s)} s/batch, {model.knob} {model.parallelism} — {said}")


def decision_record(query_id: str, verdict: Actuation, change: TupleChange, *,
                    decision_id: str, now_ms: int, control_id: str | None,
                    dry_run: bool) -> Decision:
    return Decision(
        decision_id=decision_id, query_id=query_id, decided_at_ms=now_ms,
        action=verdict.action, parameter=change.parameter, current_value=change.current,
        target_value=change.target, reason=verdict.reason, figures=dict(verdict.figures),
        control_id=control_id, dry_run=dry_run,
    )


def outcome_record(query_id: str, *, action: str, parameter: str, target: str, reason: str,
                   decision_id: str, now_ms: int, control_id: str) -> Decision:
    """An actuation's end (ack outcome or timeout), so the audit log tells the whole story."""
    return Decision(
        decision_id=decision_id, query_id=query_id, decided_at_ms=now_ms, action=action,
        parameter=parameter, current_value="", target_value=str(target), reason=reason,
        figures={}, control_id=control_id,
    )


def advice_record(query_id: str, verdict: Recommend | Hold | Lost | Down, *, decision_id: str,
                  now_ms: int, dry_run: bool) -> Decision:
    """A verdict the controller does not act on but an operator should see: throttle,
    raise_batch_cap or start_standby (with the recommended value), cannot_help, lost,
    stopped, halted."""
    parameter, target = ((verdict.parameter, f"{verdict.value:.0f}")
                         if isinstance(verdict, Recommend) else ("", ""))
    return Decision(
        decision_id=decision_id, query_id=query_id, decided_at_ms=now_ms,
        action=verdict.action, parameter=parameter, current_value="", target_value=target,
        reason=verdict.reason, figures=dict(verdict.figures), control_id=None,
        dry_run=dry_run,
    )


def controller_record(action: str, reason: str, instance_id: str, *, decision_id: str,
                      now_ms: int, behind_s: float) -> Decision:
    """A change in the controller itself, not in a query: it stopped judging
    (`not_judging`, too far behind its metrics) or judges again (`judging`)."""
    return Decision(
        decision_id=decision_id, query_id="", decided_at_ms=now_ms, action=action,
        parameter="controller", current_value="", target_value=instance_id, reason=reason,
        figures={"behind_s": behind_s}, control_id=None, dry_run=False)


def takeover_record(instance_id: str, *, decision_id: str, now_ms: int,
                    resumed: tuple[str, ...], gained: Collection[int] = (0,),
                    shards: int = 1) -> Decision:
    """The first record a new leader of some shards writes: who leads which of them from
    now on (also in its figures, `shards.leaders`), and what it resumed."""
    what = "; ".join(resumed) if resumed else "nothing in flight"
    return Decision(
        decision_id=decision_id, query_id="", decided_at_ms=now_ms, action=TAKEOVER,
        parameter="leader", current_value="", target_value=instance_id,
        reason=f"controller instance {instance_id} leads {describe(gained, shards)} from now "
               f"on; resumed: {what}",
        figures={"resumed_queries": float(len(resumed)), **taken_figures(gained, shards)},
        control_id=None, dry_run=False)
