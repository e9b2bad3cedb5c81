"""Offline replay: what would the controller have decided, and when, on a recorded trace?

Owns the drive of the real `loop.ControlLoop` (so exactly production's window, model, policy
and state code) over a `trace.Trace`, with the in-memory ports of `fakes` and a `FakeClock`
that follows the recorded times: the loop cycles every `poll_timeout_s` of trace time, as it
does live, and each cycle sees the records whose Kafka timestamp has passed.

Acks. Nobody reacts to the replayed decisions, so each control tuple the loop sends is
answered APPLIED `ack_delay_s` later (a simulated ack; recorded acks are not used: traces are
recorded with no controller acting, so there are none). From then on the recorded metrics of
that query are relabelled with the applied epoch, or the loop would rightly discard them as
measured under the old configuration. They still show the old parallelism and the old
throughput: the recorded job never changed. So every event after a query's first actuation is
marked `counterfactual` — it is what the policy would do *if the change had had no effect* —
and only the events before it say what the policy would really have done. With `dry_run`
set, nothing is sent, nothing is counterfactual, and each piece of advice repeats once per
cooldown, as in production.

Neighbours: `trace` (input), `cli` (`controller replay` prints `render_text` / `to_json`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from controller.core.results import Scale
from controller.loop.cycle import ControlLoop, Ports
from controller.loop.fakes import (
    FakeClock,
    MemoryAckSource,
    MemoryBus,
    MemoryControlSink,
    MemoryDecisionLog,
    MemoryMetricsSource,
)
from controller.replay.trace import Trace, TraceEntry
from controller.settings import ControllerSettings
from schemas import Ack, Decision, Outcome

COUNTERFACTUAL_NOTE = (
    "the recorded job never changed its configuration: events marked * come after the "
    "query's first actuation and are what the policy would do if that change had had no "
    "effect")


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    ack_delay_s: float = 5.0
    """Trace seconds after which a sent control tuple is answered APPLIED."""
    tail_s: float = 0.0
    """Keep cycling this long after the end of the trace (e.g. to see a silence noticed)."""


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """One thing the controller did or concluded, at `at_s` seconds from the trace start.

    kind: `decision` (a scaling decision, sent or advised, or any other decision the loop
    logs), `outcome` (an actuation's end: ack or timeout), `verdict` (the query's non-scaling
    verdict changed kind, e.g. hold → not_ready or → cannot_help).
    """

    at_s: float
    query_id: str
    kind: str
    action: str
    reason: str
    parameter: str = ""
    current: str = ""
    target: str = ""
    counterfactual: bool = False
    figures: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    events: tuple[ReplayEvent, ...]
    start_ms: int
    end_ms: int
    records: int
    queries: tuple[str, ...]
    bad_records: int
    cycles: int
    first_actuation_s: dict[str, float]
    options: ReplayOptions
    dry_run: bool

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records, "queries": list(self.queries),
            "span_s": round((self.end_ms - self.start_ms) / 1000, 1),
            "bad_records": self.bad_records, "cycles": self.cycles,
            "actions": dict(Counter(e.action for e in self.events if e.kind == "decision")),
            "first_actuation_s": self.first_actuation_s,
            "acks": "dry run: nothing sent" if self.dry_run else
                    f"simulated: APPLIED {self.options.ack_delay_s:g} s after each control tuple",
            "note": COUNTERFACTUAL_NOTE,
        }

    def to_json(self) -> dict[str, Any]:
        return {"start_ms": self.start_ms, "end_ms": self.end_ms,
                "events": [_event_json(e) for e in self.events], "summary": self.summary()}


def replay(trace: Trace, settings: ControllerSettings,
           options: ReplayOptions = ReplayOptions()) -> ReplayResult:
    """Run the control loop over `trace` on a fake clock; deterministic for a given input."""
    return _Replay(trace, settings, options).run()


class _Replay:
    def __init__(self, trace: Trace, settings: ControllerSettings,
                 options: ReplayOptions) -> None:
        self.trace, self.settings, self.options = trace, settings, options
        self.bus = MemoryBus()
        self.clock = FakeClock(trace.start_ms)
        ids = itertools.count(1)
        self.loop = ControlLoop(settings, Ports(
            metrics=MemoryMetricsSource(self.bus.metrics),
            control=MemoryControlSink(self.bus.control, decisions=self.bus.decisions),
            acks=MemoryAckSource(self.bus.acks),
            decisions=MemoryDecisionLog(self.bus.decisions), clock=self.clock,
        ), new_id=lambda: f"replay-{next(ids)}")
        self.events: list[ReplayEvent] = []
        self.applied_epoch: dict[str, int] = {}
        self.instance: dict[str, str] = {}
        self.first_actuation_ms: dict[str, int] = {}
        self.pending_acks: list[Ack] = []
        self.last_action: dict[str, str] = {}
        self.seen_controls = 0
        self.seen_decisions = 0

    def run(self) -> ReplayResult:
        step_ms = max(100, int(self.settings.poll_timeout_s * 1000))
        end_ms = self.trace.end_ms + int(self.options.tail_s * 1000)
        entries = iter(self.trace.entries)
        upcoming = next(entries, None)
        cycles = 0
        for now_ms in range(self.trace.start_ms, end_ms + 1, step_ms):
            self.clock.ms = now_ms
            self._deliver_acks(now_ms)
            while upcoming is not None and upcoming.timestamp_ms <= now_ms:
                self._deliver(upcoming)
                upcoming = next(entries, None)
            self.loop.run_once()
            cycles += 1
            self._observe(now_ms)
        return ReplayResult(
            tuple(self.events), self.trace.start_ms, end_ms, len(self.trace.entries),
            tuple(sorted({e.metrics.query_id for e in self.trace.entries})),
            len(self.trace.bad_records), cycles,
            {q: self._at_s(ms) for q, ms in self.first_actuation_ms.items()}, self.options,
            self.settings.dry_run)

    def _deliver(self, entry: TraceEntry) -> None:
        metrics = entry.metrics
        self.instance[metrics.query_id] = metrics.instance_id
        epoch = max(metrics.config_epoch, self.applied_epoch.get(metrics.query_id, 0))
        self.bus.publish_metrics(replace(metrics, config_epoch=epoch))

    def _deliver_acks(self, now_ms: int) -> None:
        due = [a for a in self.pending_acks if a.acked_at_ms <= now_ms]
        self.pending_acks = [a for a in self.pending_acks if a.acked_at_ms > now_ms]
        for ack in due:
            self.applied_epoch[ack.query_id] = max(ack.epoch,
                                                   self.applied_epoch.get(ack.query_id, 0))
            self.bus.publish_ack(ack)

    def _observe(self, now_ms: int) -> None:
        controls = self.bus.sent_controls()[self.seen_controls:]
        self.seen_controls += len(controls)
        for control in controls:
            self.first_actuation_ms.setdefault(control.query_id, now_ms)
            self.pending_acks.append(Ack(
                control.control_id, control.query_id, self.instance.get(control.query_id, ""),
                control.epoch, Outcome.APPLIED,
                f"replay: assumed applied {self.options.ack_delay_s:g} s after sending; the "
                "recorded job did not change", 0,
                now_ms + int(self.options.ack_delay_s * 1000)))
        decisions = self.bus.written_decisions()[self.seen_decisions:]
        self.seen_decisions += len(decisions)
        for decision in decisions:
            self.events.append(self._decision_event(decision, now_ms))
            self.last_action[decision.query_id] = decision.action
        for query_id, query in self.loop.queries.items():
            verdict = query.verdict
            if (verdict is not None and not isinstance(verdict, Scale)
                    and verdict.action != self.last_action.get(query_id)):
                self.last_action[query_id] = verdict.action
                self.events.append(ReplayEvent(
                    self._at_s(now_ms), query_id, "verdict", verdict.action, verdict.reason,
                    counterfactual=self._counterfactual(query_id, now_ms),
                    figures=dict(getattr(verdict, "figures", {}))))

    def _decision_event(self, decision: Decision, now_ms: int) -> ReplayEvent:
        kind = "outcome" if decision.action.startswith("ack_") else "decision"
        # The decision that makes the first actuation is not itself counterfactual.
        counterfactual = (self._counterfactual(decision.query_id, now_ms)
                          and not (kind == "decision" and decision.control_id is not None
                                   and self.first_actuation_ms[decision.query_id] == now_ms))
        return ReplayEvent(
            self._at_s(now_ms), decision.query_id, kind, decision.action, decision.reason,
            decision.parameter, decision.current_value, decision.target_value,
            counterfactual, dict(decision.figures))

    def _counterfactual(self, query_id: str, now_ms: int) -> bool:
        first = self.first_actuation_ms.get(query_id)
        return first is not None and now_ms >= first

    def _at_s(self, ms: int) -> float:
        return round((ms - self.trace.start_ms) / 1000, 1)


def _event_json(event: ReplayEvent) -> dict[str, Any]:
    return {"at_s": event.at_s, "query_id": event.query_id, "kind": event.kind,
            "action": event.action, "parameter": event.parameter, "current": event.current,
            "target": event.target, "reason": event.reason,
            "counterfactual": event.counterfactual, "figures": event.figures}


def render_text(result: ReplayResult, source: str,
                out: Callable[[str], None] = print) -> None:
    """The decisions as an operator reads them, then the summary."""
    s = result.summary()
    out(f"replay of {source}: {s['records']} metrics records of {len(result.queries)} "
        f"quer{'y' if len(result.queries) == 1 else 'ies'} over {s['span_s']} s "
        f"({s['bad_records']} bad); acks {s['acks']}")
    for e in result.events:
        mark = "*" if e.counterfactual else " "
        change = f" {e.parameter} {e.current} → {e.target}" if e.kind == "decision" and \
            e.parameter else ""
        out(f"{mark} {e.at_s:+7.1f} s  {e.query_id}  {e.action}{change}: {e.reason}")
    actions = ", ".join(f"{n} {a}" for a, n in sorted(s["actions"].items())) or "no decisions"
    out(f"summary: {actions}; {result.cycles} cycles")
    for query_id, at_s in s["first_actuation_s"].items():
        out(f"  {query_id}: first actuation at {at_s:+.1f} s")
    if s["first_actuation_s"]:
        out(f"note: {COUNTERFACTUAL_NOTE}")
