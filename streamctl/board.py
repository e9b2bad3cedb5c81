"""What `streamctl status` and `streamctl decisions` show, folded from streamctl's topics (pure).

Owns the per-query status row (rates, lag, parallelism, busy share, last decision, last pause)
and the text of both commands. Figures come from the jobs' own metrics through the demo's
`QueryView`, not from the controller's model, so the table shows what the jobs reported; the
decision column shows what the controller concluded from them. Neighbours: `watch` (reads the
topics and prints), `view` (per-query rates).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from schemas import TaskMetrics
from schemas.records import TAKEOVER, Ack, Decision, Outcome
from streamctl.view import QueryView

BUSY_WINDOW_MS = 30_000
"""The wall-clock span the status table's busy share covers, ending now."""


@dataclass
class QueryStatus:
    """Everything known about one query, updated record by record."""

    view: QueryView
    instances: dict[str, int] = field(default_factory=dict)  # instance id → last seen ms
    last_decision: Decision | None = None
    last_pause_ack: Ack | None = None  # the newest ack that changed something

    def busy_share(self, now_ms: int) -> float:
        """Share of the last `BUSY_WINDOW_MS` up to `now_ms` (or of the part of it the metrics
        read cover) that the query spent running batches. Spark runs no batch while nothing
        arrives, so an idle query reads 0 %, however busy its last batches were."""
        batches = [s for s in self.view.samples if s.batch_id >= 0]
        if not batches:
            return 0.0
        since_ms = max(now_ms - BUSY_WINDOW_MS, min(s.batch_end_ms - s.busy_ms for s in batches))
        span_ms = now_ms - since_ms
        busy_ms = sum(max(0, min(s.batch_end_ms, now_ms) - max(s.batch_end_ms - s.busy_ms,
                                                               since_ms)) for s in batches)
        return min(1.0, busy_ms / span_ms) if span_ms > 0 else 0.0

    def last_seen_ms(self) -> int:
        return max(self.instances.values(), default=0)


@dataclass
class Board:
    """All queries seen on the metrics, decisions and acks topics."""

    queries: dict[str, QueryStatus] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    acks: dict[str, Ack] = field(default_factory=dict)  # control id → its ack
    takeovers: list[Decision] = field(default_factory=list)
    """The controller instances' takeovers in the period read, oldest first: the last one
    names the leader."""

    def add(self, record: object) -> None:
        if isinstance(record, TaskMetrics):
            status = self._query(record.query_id)
            status.view.add(record)
            status.instances[record.instance_id] = record.batch_end_ms
        elif isinstance(record, Decision) and record.action == TAKEOVER:
            self.takeovers.append(record)
        elif isinstance(record, Decision):
            self._query(record.query_id).last_decision = record
            self.decisions.append(record)
        elif isinstance(record, Ack):
            self._add_ack(record)

    def add_all(self, records: Iterable[object]) -> None:
        for record in records:
            self.add(record)

    def _add_ack(self, ack: Ack) -> None:
        self.acks[ack.control_id] = ack
        status = self._query(ack.query_id)
        if ack.pause_ms > 0:
            status.last_pause_ack = ack

    def ack_for(self, decision: Decision) -> Ack | None:
        return self.acks.get(decision.control_id) if decision.control_id else None

    def _query(self, query_id: str) -> QueryStatus:
        if query_id not in self.queries:
            self.queries[query_id] = QueryStatus(QueryView(query_id))
        return self.queries[query_id]


STATUS_HEADER = (f"{'query':<22} {'arrival/s':>9} {'processed/s':>11} {'lag':>8} "
                 f"{'par':>4} {'busy':>5} {'seen':>6}  last decision / last pause")


def status_table(board: Board, now_ms: int, reason_width: int = 100) -> list[str]:
    """The `streamctl status` table: who leads the controllers, then one row per query with
    its decision and pause lines."""
    lines = [leader_line(board, now_ms)]
    if not board.queries:
        return [*lines, "no query has published metrics in the period read (is a job running?)"]
    lines.append(STATUS_HEADER)
    for query_id in sorted(board.queries):
        lines += _status_rows(query_id, board.queries[query_id], now_ms, reason_width)
    return lines


def leader_line(board: Board, now_ms: int) -> str:
    if not board.takeovers:
        return ("controller: no takeover in the period read (none runs, or one has led since "
                "before it)")
    last = board.takeovers[-1]
    count = len(board.takeovers)
    return (f"controller: {last.target_value} leads, since {_age(now_ms - last.decided_at_ms)} "
            f"ago ({count} takeover{'s' if count != 1 else ''} in the period read)")


def _status_rows(query_id: str, q: QueryStatus, now_ms: int, width: int) -> list[str]:
    view = q.view
    seen = _age(now_ms - q.last_seen_ms()) if q.instances else "-"
    row = (f"{query_id[:22]:<22} {view.arrival_per_s():9.0f} {view.processed_per_s():11.0f} "
           f"{view.lag_records():8d} {view.parallelism():4d} {q.busy_share(now_ms) * 100:4.0f}% "
           f"{seen:>6}  {_decision_summary(q.last_decision, now_ms)}")
    out = [row]
    running = view.last_beat
    if running is not None and running.running_batch_id >= 0:
        out.append(f"{'':<22}   running: batch {running.running_batch_id} for "
                   f"{_age(now_ms - running.running_since_ms)} (as of its beat "
                   f"{_age(now_ms - running.batch_end_ms)} ago)")
    if q.last_decision is not None:
        out.append(f"{'':<22}   reason: {_clip(q.last_decision.reason, width)}")
    if q.last_pause_ack is not None:
        a = q.last_pause_ack
        ago = _age(now_ms - a.acked_at_ms)
        out.append(f"{'':<22}   last pause: {a.pause_ms / 1000:.1f} s, {ago} ago "
                   f"({a.outcome.value.lower()}: {_clip(a.detail, width)})")
    return out


def _decision_summary(d: Decision | None, now_ms: int) -> str:
    if d is None:
        return "no decision yet"
    dry = " (dry run)" if d.dry_run else ""
    return (f"{d.action} {d.parameter} {d.current_value}→{d.target_value}{dry}, "
            f"{_age(now_ms - d.decided_at_ms)} ago")


def decision_lines(decision: Decision, ack: Ack | None) -> list[str]:
    """One decision of the log as `streamctl decisions` prints it: a head line and its reason."""
    when = datetime.fromtimestamp(decision.decided_at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    if decision.action == TAKEOVER:
        outcome = "a new leader among the controllers"
    elif decision.dry_run:
        outcome = "dry run, not sent"
    elif decision.control_id is None:
        outcome = "advice, nothing sent"
    elif ack is None:
        outcome = "no ack yet"
    else:
        outcome = f"{ack.outcome.value.lower()}, pause {ack.pause_ms / 1000:.1f} s"
    head = (f"{when}Z  {decision.query_id}  {decision.action} {decision.parameter} "
            f"{decision.current_value}→{decision.target_value}  [{outcome}]")
    lines = [head, f"    {decision.reason}"]
    if ack is not None and ack.outcome is not Outcome.APPLIED:
        lines.append(f"    ack: {ack.detail}")
    return lines


def ack_line(ack: Ack) -> str:
    """An ack that arrived after its decision was printed."""
    return (f"    ack for {ack.query_id} control {ack.control_id}: {ack.outcome.value.lower()}, "
            f"pause {ack.pause_ms / 1000:.1f} s: {ack.detail}")


def _age(ms: int) -> str:
    s = max(0, ms) / 1000
    if s < 100:
        return f"{s:.0f}s"
    if s < 6000:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.0f}h"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
