"""What `streamctl status` and `streamctl decisions` show, folded from streamctl's topics (pure).

Owns the per-query status row (state, rates, lag, parallelism, busy share, last decision, last
pause, where its metrics are served, input lost to retention), which rows a fleet's table
shows and in what order (those that need attention first), and the text of both commands.
Figures come from the jobs' own metrics through the demo's `QueryView`, not from the
controller's model, so the table shows what the jobs reported; the decision column shows what
the controller concluded from them. The lag is the broker's end offsets (read by `watch`) less
where the last committed batch ended, so a job that is down reads what piles up; without them
a running job's lag is its last batch's, and a job that is down reads `?`. A job that runs no
query shows no rates (`-`): its last ones are not current. Neighbours: `watch` (reads the
topics and the end offsets, and prints), `view` (per-query rates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase

from controller.core.objectives import delay_s, drain_s, standings
from controller.core.shards import describe, leaders
from schemas import SourcePartition, TaskMetrics
from schemas.objectives import Objectives
from schemas.records import TAKEOVER, Ack, ControlTuple, Decision, Outcome
from streamctl.view import QueryView

BUSY_WINDOW_MS = 30_000
"""The wall-clock span the status table's busy share covers, ending now."""
SILENT_AFTER_BEATS = 3
"""An instance that sends liveness beats and is unheard for this many of its beat intervals
reads `silent`: gone or frozen (the controller's default takes 2.5 for a loss)."""
SILENT_AFTER_MS = 10_000
"""One that sends none reads `silent` after this long, or three of its batch intervals if
longer."""
SETTLE_MS = 5_000
"""A control tuple no decision has named this long after it was issued was sent by someone
else than a controller (`streamctl job send`, an operator's own tool): a controller writes its
decision in the tuple's transaction, so this only covers the decisions topic being read later
than the control topic."""
SKEW_SHARE = 0.7
"""A source partition holding more than this share of the lag is named (as the controller's
default `policy.skew_partition_share` does in its reasons)."""

PartitionKey = tuple[str, int]


@dataclass
class QueryStatus:
    """Everything known about one query, updated record by record."""

    view: QueryView
    instances: dict[str, int] = field(default_factory=dict)  # instance id → last seen ms
    addresses: dict[str, str] = field(default_factory=dict)  # instance id → metrics address
    last_decision: Decision | None = None
    last_pause_ack: Ack | None = None  # the newest ack that changed something
    lost_ranges: dict[PartitionKey, SourcePartition] = field(default_factory=dict)
    """Input deleted by retention before the query read it, per partition (newest report)."""

    def newest(self) -> TaskMetrics | None:
        """The active instance's newest record: a batch, a heartbeat or a beat."""
        candidates = [r for r in (self.view.samples[-1] if self.view.samples else None,
                                  self.view.last_beat) if r is not None]
        return max(candidates, key=lambda r: r.batch_end_ms, default=None)

    def state(self, now_ms: int) -> str:
        """running, stopped (on purpose), halted (waiting for its operator) or silent."""
        newest = self.newest()
        if newest is None:
            return "standby" if self.instances else "unknown"
        if newest.stopped:
            return "stopped"
        if newest.halted:
            return "halted"
        quiet_ms = now_ms - self.last_seen_ms()
        limit_ms = (SILENT_AFTER_BEATS * newest.beat_interval_ms if newest.beat_interval_ms
                    else max(SILENT_AFTER_MS, 3 * newest.trigger_interval_ms, 3 * newest.busy_ms))
        return "silent" if quiet_ms > limit_ms else "running"

    def committed(self) -> dict[PartitionKey, int]:
        """Where the last committed batch left each source partition ({} before any)."""
        found = next((s for s in reversed(self.view.samples) if s.partitions), None)
        return {} if found is None else {(p.topic, p.partition): p.end_offset
                                         for p in found.partitions}

    def lag(self, ends: Mapping[PartitionKey, int],
            running: bool) -> dict[PartitionKey, int] | None:
        """Records waiting per source partition: the broker's end offsets less the last commit;
        without them the last batch's own lag while it runs, else None (unknown)."""
        committed = self.committed()
        if committed and all(k in ends for k in committed):
            return {k: max(0, ends[k] - end) for k, end in committed.items()}
        if running and self.view.samples:
            return {(p.topic, p.partition): max(0, p.latest_offset - p.end_offset)
                    for p in self.view.samples[-1].partitions}
        return None

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
    tuples: dict[str, ControlTuple] = field(default_factory=dict)
    """Every control tuple read, by control id: the controllers' and everyone else's."""
    decided: set[str] = field(default_factory=set)
    """Control ids some decision names."""

    def add(self, record: object) -> None:
        if isinstance(record, TaskMetrics):
            status = self._query(record.query_id)
            status.view.add(record)
            status.instances[record.instance_id] = record.batch_end_ms
            if record.metrics_address:
                status.addresses[record.instance_id] = record.metrics_address
            for lost in record.lost_ranges:
                status.lost_ranges[(lost.topic, lost.partition)] = lost
        elif isinstance(record, Decision) and record.action == TAKEOVER:
            self.takeovers.append(record)
        elif isinstance(record, Decision):
            self._query(record.query_id).last_decision = record
            self.decisions.append(record)
            if record.control_id:
                self.decided.add(record.control_id)
        elif isinstance(record, ControlTuple):
            self.tuples[record.control_id] = record
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

    def other_tuples(self, now_ms: int) -> list[ControlTuple]:
        """Control tuples no decision names, `SETTLE_MS` after they were issued, oldest first:
        what someone other than a controller sent."""
        return sorted((t for t in self.tuples.values() if t.control_id not in self.decided
                       and now_ms - t.issued_at_ms >= SETTLE_MS),
                      key=lambda t: t.issued_at_ms)

    def ack_for(self, decision: Decision) -> Ack | None:
        return self.acks.get(decision.control_id) if decision.control_id else None

    def _query(self, query_id: str) -> QueryStatus:
        if query_id not in self.queries:
            self.queries[query_id] = QueryStatus(QueryView(query_id))
        return self.queries[query_id]


STATUS_HEADER = (f"{'query':<22} {'arrival/s':>9} {'processed/s':>11} {'lag':>8} "
                 f"{'par':>4} {'busy':>5} {'seen':>6} {'state':<8}  last decision / last pause")


ATTENTION = {"silent": 0, "halted": 1, "running": 2}
"""States in the order an operator needs them: a query that is down, one waiting for its
operator, then the running ones (stopped, standby-only and unknown ones last)."""


@dataclass(frozen=True)
class Selection:
    """Which queries the table shows: those whose id matches `query` (a shell-style pattern;
    None: all), at most `top` of them (0: all), the ones that need attention first."""

    query: str | None = None
    top: int = 0

    def matches(self, query_id: str) -> bool:
        return self.query is None or fnmatchcase(query_id, self.query)


def status_table(board: Board, now_ms: int, reason_width: int = 100,
                 ends: Mapping[PartitionKey, int] | None = None,
                 selection: Selection = Selection()) -> list[str]:
    """The `streamctl status` table: who leads the controllers, then one row per query with
    its decision and pause lines, in `attention_order`. `ends`: the source partitions' end
    offsets at the broker, read now (the true lag)."""
    lines = [leader_line(board, now_ms)]
    if not board.queries:
        return [*lines, "no query has published metrics in the period read (is a job running?)"]
    chosen = [q for q in board.queries if selection.matches(q)]
    if not chosen:
        return [*lines, f"no query id matches {selection.query!r} among the "
                        f"{len(board.queries)} in the period read"]
    ordered = attention_order(board, chosen, now_ms, ends or {})
    shown = ordered[:selection.top] if selection.top > 0 else ordered
    lines.append(STATUS_HEADER)
    others = {t.query_id: t for t in board.other_tuples(now_ms)}  # the newest per query
    for query_id in shown:
        lines += _status_rows(query_id, board.queries[query_id], now_ms, reason_width,
                              ends or {}, others.get(query_id))
    if len(shown) < len(ordered):
        lines.append(f"… {len(ordered) - len(shown)} more quer"
                     f"{'y' if len(ordered) - len(shown) == 1 else 'ies'} not shown, each "
                     "with less to catch up (--top 0 shows all, --query narrows)")
    return lines


def attention_order(board: Board, query_ids: Iterable[str], now_ms: int,
                    ends: Mapping[PartitionKey, int]) -> list[str]:
    """Down first, then halted, then the running ones with the most lag (the busiest first
    among equals); the rest after them; by id where nothing else tells them apart."""
    def key(query_id: str) -> tuple[int, int, float, str]:
        q = board.queries[query_id]
        state = q.state(now_ms)
        lag = q.lag(ends, state == "running")
        return (ATTENTION.get(state, len(ATTENTION)), -sum((lag or {}).values()),
                -q.busy_share(now_ms), query_id)
    return sorted(query_ids, key=key)


def source_partitions(board: Board) -> set[PartitionKey]:
    """Every source partition whose end offset the table needs."""
    return {k for q in board.queries.values() for k in q.committed()}


def leader_line(board: Board, now_ms: int) -> str:
    """Who leads the controllers: one instance, or each instance's shards of the queries."""
    if not board.takeovers:
        return ("controller: no takeover in the period read (none runs, or one has led since "
                "before it)")
    last = board.takeovers[-1]
    count = len(board.takeovers)
    when = (f"{_age(now_ms - last.decided_at_ms)} ago ({count} takeover"
            f"{'s' if count != 1 else ''} in the period read)")
    led, shards = leaders(board.takeovers)
    if shards == 1:
        return f"controller: {last.target_value} leads, since {when}"
    by_instance: dict[str, list[int]] = {}
    for shard, instance in sorted(led.items()):
        if shard < shards:
            by_instance.setdefault(instance, []).append(shard)
    parts = [f"{instance} {describe(mine, shards)}" for instance, mine in by_instance.items()]
    unseen = shards - sum(len(mine) for mine in by_instance.values())
    if unseen:
        parts.append(f"{unseen} not taken over in the period read")
    return f"controller: {'; '.join(parts)}; the last takeover {when}"


def _status_rows(query_id: str, q: QueryStatus, now_ms: int, width: int,
                 ends: Mapping[PartitionKey, int], other: ControlTuple | None) -> list[str]:
    """The query's row and the lines below it; `other`: its newest tuple no decision names,
    shown instead of the last decision when newer."""
    view = q.view
    seen = _age(now_ms - q.last_seen_ms()) if q.instances else "-"
    state = q.state(now_ms)
    current = state == "running"
    lag = q.lag(ends, current)
    rates = (f"{view.arrival_per_s():9.0f} {view.processed_per_s():11.0f}" if current
             else f"{'-':>9} {'-':>11}")
    lag_text = str(sum(lag.values())) if lag is not None else "?"
    last = q.last_decision
    shown = other if other is not None and (
        last is None or other.issued_at_ms > last.decided_at_ms) else None
    summary = (_tuple_summary(shown, now_ms) if shown is not None
               else _decision_summary(last, now_ms))
    row = (f"{query_id[:22]:<22} {rates} {lag_text:>8} {view.parallelism():4d} "
           f"{q.busy_share(now_ms) * 100:4.0f}% {seen:>6} {state:<8}  {summary}")
    out = [row, *_state_lines(q, state, lag, width)]
    running = view.last_beat
    if running is not None and running.running_batch_id >= 0:
        out.append(f"{'':<22}   running: batch {running.running_batch_id} for "
                   f"{_age(now_ms - running.running_since_ms)} (as of its beat "
                   f"{_age(now_ms - running.batch_end_ms)} ago)")
    reason = shown.reason if shown is not None else last.reason if last is not None else ""
    if reason:
        out.append(f"{'':<22}   reason: {_clip(reason, width)}")
    if q.last_pause_ack is not None:
        a = q.last_pause_ack
        ago = _age(now_ms - a.acked_at_ms)
        out.append(f"{'':<22}   last pause: {a.pause_ms / 1000:.1f} s, {ago} ago "
                   f"({a.outcome.value.lower()}: {_clip(a.detail, width)})")
    return out


def _state_lines(q: QueryStatus, state: str, lag: dict[PartitionKey, int] | None,
                 width: int) -> list[str]:
    """What a row does not fit: why a job runs no query, where its metrics are served, the
    input it lost, its objectives, the shedding in force, a skewed lag."""
    pad = f"{'':<22}   "
    out = []
    newest = q.newest()
    if state == "halted" and newest is not None:
        out.append(f"{pad}halted: {_clip(newest.halted, width)}")
    if q.lost_ranges:
        lost = sorted(q.lost_ranges.values(), key=lambda p: (p.topic, p.partition))
        total = sum(p.end_offset - p.start_offset for p in lost)
        out.append(f"{pad}input lost to retention: {total} records (" + ", ".join(
            f"{p.topic}/{p.partition} offsets {p.start_offset}-{p.end_offset - 1}"
            for p in lost) + ")")
    if q.addresses:
        out.append(f"{pad}metrics: " + ", ".join(
            f"{address} ({instance})" for instance, address in sorted(q.addresses.items())))
    total = sum(lag.values()) if lag else 0
    if newest is not None:
        out += [f"{pad}objective: {line}" for line in _objective_lines(q, newest, state, lag)]
    if newest is not None and newest.shed_fraction > 0:
        out.append(f"{pad}shedding: {newest.shed_fraction * 100:.0f}% of the low-priority "
                   f"records (the job's bound {newest.max_shed_fraction * 100:.0f}%)")
    if lag and len(lag) > 1 and total > 0:
        (topic, partition), most = max(lag.items(), key=lambda item: item[1])
        if most / total > SKEW_SHARE:
            out.append(f"{pad}skew: partition {topic}/{partition} holds "
                       f"{most * 100 / total:.0f}% of the lag across {len(lag)} partitions")
    return out


def _objective_lines(q: QueryStatus, newest: TaskMetrics, state: str,
                     lag: dict[PartitionKey, int] | None) -> list[str]:
    """Each objective the job states, against its lag and the capacity its batches show, as
    the controller judges them (unknown while it runs no query or the lag is unknown)."""
    objectives = Objectives.from_ms(newest.max_delay_ms, newest.drain_within_ms)
    if not objectives.stated:
        return []
    if state != "running" or lag is None:
        return [s.describe() for s in standings(objectives, None, None)]
    waiting, capacity = float(sum(lag.values())), q.view.capacity_per_s()
    trigger_s = newest.trigger_interval_ms / 1000
    return [s.describe() for s in standings(
        objectives, delay_s(waiting, capacity, trigger_s),
        drain_s(waiting, capacity, q.view.arrival_per_s(), trigger_s))]


def _decision_summary(d: Decision | None, now_ms: int) -> str:
    if d is None:
        return "no decision in the period read"
    dry = " (dry run)" if d.dry_run else ""
    return (f"{d.action} {d.parameter} {d.current_value}→{d.target_value}{dry}, "
            f"{_age(now_ms - d.decided_at_ms)} ago")


def _tuple_summary(t: ControlTuple, now_ms: int) -> str:
    return (f"{t.describe()} sent by {t.issuer}, "
            f"{_age(now_ms - t.issued_at_ms)} ago")


def tuple_lines(t: ControlTuple, ack: Ack | None) -> list[str]:
    """A control tuple no decision names, as `streamctl decisions` prints it."""
    when = datetime.fromtimestamp(t.issued_at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    outcome = ("no ack yet" if ack is None
               else f"{ack.outcome.value.lower()}, pause {ack.pause_ms / 1000:.1f} s")
    lines = [f"{when}Z  {t.query_id}  {t.describe()} (epoch {t.epoch})  "
             f"[sent by {t.issuer}, no decision; {outcome}]"]
    if t.reason:
        lines.append(f"    {t.reason}")
    if ack is not None and ack.outcome is not Outcome.APPLIED:
        lines.append(f"    ack: {ack.detail}")
    return lines


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
