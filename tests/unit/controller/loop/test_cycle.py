"""The loop end to end on in-memory ports: send, wait for the ack, cool down, record."""

from __future__ import annotations

import itertools
import logging
from dataclasses import replace

import pytest

from controller.core.model import QueryModel
from controller.core.results import NotReady
from controller.loop.cycle import ControlLoop, Ports
from controller.loop.fakes import (
    FakeClock,
    MemoryAckSource,
    MemoryBus,
    MemoryControlSink,
    MemoryDecisionLog,
    MemoryMetricsSource,
)
from controller.loop.ports import NullObserver
from controller.settings import ControllerSettings, PolicySettings
from schemas import Ack, DecodeError, KnobSetting, Outcome, TaskMetrics
from tests.unit.controller.traces import Job, end_ms, simulate

# 800/s into 2 units of 210/s, capped at 500 records a batch: backlogged, epoch 3 in force.
OVERLOADED = Job(rates=[(0, 800)], per_unit=210, parallelism=2, max_per_batch=500, epoch=3)
SETTINGS = ControllerSettings(policy=PolicySettings(cooldown_s=30), ack_timeout_s=20)


class Recorder(NullObserver):
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def acked(self, query_id: str, outcome: str, pause_ms: int) -> None:
        self.events.append(("ack", query_id, outcome))

    def ack_timed_out(self, query_id: str) -> None:
        self.events.append(("timeout", query_id))

    def modelled(self, model: QueryModel, desired: int | None) -> None:
        self.events.append(("modelled", model.query_id, str(desired)))


class Harness:
    def __init__(self, settings: ControllerSettings = SETTINGS) -> None:
        self.bus, self.clock, self.observer = MemoryBus(), FakeClock(), Recorder()
        self.decode_errors: list[DecodeError] = []
        ports = Ports(
            metrics=MemoryMetricsSource(self.bus.metrics, on_decode_error=self.decode_errors.append,
                                        clock=self.clock),
            control=MemoryControlSink(self.bus.control, decisions=self.bus.decisions),
            acks=MemoryAckSource(self.bus.acks),
            decisions=MemoryDecisionLog(self.bus.decisions), clock=self.clock,
            observer=self.observer)
        ids = iter(f"id-{n}" for n in range(1000))
        self.loop = ControlLoop(settings, ports, new_id=lambda: next(ids))

    def feed(self, trace: list[TaskMetrics], cycles: int = 1) -> None:
        self.bus.publish_metrics(*trace)
        self.clock.ms = end_ms(trace)
        self.loop.run(max_cycles=cycles)

    def ack(self, outcome: Outcome, epoch: int = 4) -> None:
        control = self.bus.sent_controls()[-1]
        self.bus.publish_ack(Ack(control.control_id, control.query_id, "i1", epoch, outcome,
                                 "done", 1500, self.clock.now_ms()))


def test_backlog_sends_one_tuple_then_waits_for_the_ack_and_cools_down() -> None:
    h = Harness()
    h.feed(simulate(OVERLOADED, 30))
    [control] = h.bus.sent_controls()
    assert (control.query_id, control.operator_id, control.parameter) == (
        "q1", "source", "input_parallelism")
    assert int(control.value) > 2 and control.epoch == 4
    assert control.issuer == "streamctl-controller" and "backlog" in control.reason
    [decision] = h.bus.written_decisions()
    assert (decision.action, decision.control_id, decision.dry_run) == (
        "scale_up", control.control_id, False)
    assert decision.target_value == control.value and decision.figures["arrival_rate"] > 700

    h.feed(simulate(OVERLOADED, 10, start_s=30, first_batch=100), cycles=3)
    assert len(h.bus.sent_controls()) == 1  # in flight: no second tuple

    h.ack(Outcome.APPLIED)
    h.loop.run(max_cycles=1)
    assert ("ack", "q1", "APPLIED") in h.observer.events
    assert h.bus.written_decisions()[-1].action == "ack_applied"

    resized = replace(OVERLOADED, epoch=4, rates=[(0, 3000)])
    h.feed(simulate(resized, 20, start_s=45, first_batch=200), cycles=3)
    assert len(h.bus.sent_controls()) == 1  # cooling down

    h.feed(simulate(resized, 30, start_s=65, first_batch=300))
    second = h.bus.sent_controls()[-1]
    assert len(h.bus.sent_controls()) == 2 and second.epoch == 5


def test_a_batch_cap_that_follows_the_units_is_sent_together_with_them_in_one_tuple() -> None:
    h = Harness()
    reporting = [replace(m, max_batch_cap=100_000)
                 for m in simulate(replace(OVERLOADED, report_cap=True), 30)]
    h.feed(reporting)
    [control] = h.bus.sent_controls()
    units = int(control.value)
    assert control.parameter == "input_parallelism" and units > 2
    assert control.together == (KnobSetting("max_offsets_per_trigger", str(250 * units)),)
    [decision] = h.bus.written_decisions()
    assert decision.figures["batch_cap_target"] == 250 * units
    assert "batches of at most" in decision.reason


def test_metrics_from_before_the_change_are_ignored_after_the_ack() -> None:
    h = Harness()
    h.feed(simulate(OVERLOADED, 30))
    h.ack(Outcome.APPLIED)
    h.feed(simulate(OVERLOADED, 30, start_s=30, first_batch=100))
    assert h.loop.queries["q1"].verdict == NotReady(
        "stabilising after a change to epoch 4: only 0 samples, need 4")


def test_ack_timeout_is_recorded_and_the_next_epoch_skips_past_it() -> None:
    h = Harness()
    h.feed(simulate(OVERLOADED, 30))
    h.clock.advance(21)
    h.loop.run(max_cycles=1)
    assert ("timeout", "q1") in h.observer.events
    assert h.bus.written_decisions()[-1].action == "ack_timeout"
    assert h.loop.queries["q1"].state.in_flight is None
    h.feed(simulate(OVERLOADED, 40, start_s=51, first_batch=100))
    assert [c.epoch for c in h.bus.sent_controls()] == [4, 5]


def test_a_rejected_value_is_recorded_and_not_retried_at_once() -> None:
    h = Harness()
    h.feed(simulate(OVERLOADED, 30))
    h.ack(Outcome.REJECTED)
    h.feed(simulate(OVERLOADED, 10, start_s=30, first_batch=100), cycles=3)
    assert len(h.bus.sent_controls()) == 1
    assert h.bus.written_decisions()[-1].action == "ack_rejected"


def test_dry_run_sends_nothing_but_logs_and_records(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(replace(SETTINGS, dry_run=True))
    with caplog.at_level(logging.INFO, logger="controller"):
        h.feed(simulate(OVERLOADED, 30), cycles=3)
    assert h.bus.sent_controls() == []
    [decision] = h.bus.written_decisions()
    assert decision.dry_run and decision.control_id is None and decision.action == "scale_up"
    assert any("dry run, not sent" in r.getMessage() for r in caplog.records)


def test_an_overloaded_query_that_holds_is_recorded_once_each_overload_record_interval() -> None:
    settings = replace(SETTINGS, dry_run=True, overload_record_interval_s=5)
    h = Harness(settings)
    h.feed(simulate(OVERLOADED, 30))  # scale_up (recorded); then its 30 s cooldown's hold
    for second in range(30, 58):  # one cycle a second, overloaded throughout
        h.feed(simulate(OVERLOADED, 1, start_s=second, first_batch=100 + second))
    [scaled, *held] = h.bus.written_decisions()
    assert scaled.action == "scale_up" and {d.action for d in held} == {"hold"}
    times = [scaled.decided_at_ms] + [d.decided_at_ms for d in held]
    assert len(held) == 5 and all(5_000 <= b - a < 6_000
                                  for a, b in itertools.pairwise(times)), times


def test_a_query_within_its_capacity_that_holds_leaves_no_record() -> None:
    within = replace(OVERLOADED, rates=[(0, 100)])  # a quarter of its 420/s
    h = Harness(replace(SETTINGS, dry_run=True, overload_record_interval_s=10))
    h.feed(simulate(within, 30))
    for second in range(30, 72):
        h.feed(simulate(within, 1, start_s=second, first_batch=100 + second))
    assert h.loop.queries["q1"].verdict.action == "hold"
    assert h.bus.written_decisions() == []


def test_garbage_is_counted_and_skipped() -> None:
    h = Harness()
    h.bus.metrics.append(b"not avro")
    h.feed(simulate(OVERLOADED, 30))
    [error] = h.decode_errors
    assert (error.topic, error.offset) == ("streamctl.metrics", 0)
    assert len(h.bus.sent_controls()) == 1


def test_a_run_is_bounded_by_timeout_on_the_injected_clock() -> None:
    h = Harness(replace(SETTINGS, poll_timeout_s=1.0))
    assert h.loop.run(timeout_s=5) == 5
    h.loop.stop()
    assert h.loop.run(max_cycles=10) == 0


def test_status_lines_report_the_figures(caplog: pytest.LogCaptureFixture) -> None:
    h = Harness()
    with caplog.at_level(logging.INFO, logger="controller.status"):
        h.feed(simulate(OVERLOADED, 30))
    [line] = [r.getMessage() for r in caplog.records if r.name == "controller.status"]
    assert line.startswith("q1: λ 8") and "capacity 4" in line and "parallelism 2" in line


class LostRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.lost_now: list[str] = []
        self.recommended_actions: list[str] = []

    def lost(self, query_ids: list[str]) -> None:
        self.lost_now = query_ids

    def recommended(self, action: str) -> None:
        self.recommended_actions.append(action)


def test_a_silent_query_is_reported_lost_once_and_never_scaled() -> None:
    h = Harness()
    h.observer = LostRecorder()
    h.loop.ports.observer = h.observer
    steady = Job(rates=[(0, 300)], per_unit=210, parallelism=2)
    h.feed(simulate(steady, 30))
    h.clock.advance(30)
    h.loop.run(max_cycles=3)
    assert h.loop.queries["q1"].verdict.action == "lost"
    assert h.observer.lost_now == ["q1"]
    [decision] = [d for d in h.bus.written_decisions() if d.action == "lost"]
    assert decision.reason.startswith("no metrics for ")
    assert h.bus.sent_controls() == []
    h.feed(simulate(steady, 10, start_s=62, first_batch=100))
    assert h.loop.queries["q1"].verdict.action != "lost" and h.observer.lost_now == []


def pipeline(c_rates: list[tuple[float, float]]) -> list[TaskMetrics]:
    """b is the bottleneck (600/s into 2 × 100/s); c, of 2 × 200/s, sees only what b lets
    through, at `c_rates`."""
    b = Job(rates=[(0, 600)], per_unit=100, parallelism=2, max_per_batch=500, query_id="b",
            source_topic="a-out", sink_topic="b-out")
    c = Job(rates=c_rates, per_unit=200, parallelism=2, max_per_batch=500, overhead_s=0.3,
            query_id="c", source_topic="b-out", sink_topic="out")
    return sorted(simulate(b, 30) + simulate(c, 30), key=lambda s: s.batch_end_ms)


def test_a_pipeline_gets_all_its_tuples_in_one_cycle() -> None:
    """c's batches of 60 and then 200 records tell its per-batch cost from its records: it is
    sized for what b will send once resized, in the same cycle as b."""
    h = Harness()
    h.feed(pipeline([(0, 60), (15, 200)]))
    sent = {control.query_id: int(control.value) for control in h.bus.sent_controls()}
    assert set(sent) == {"b", "c"} and sent["c"] > 2
    assert "b will send" in h.bus.sent_controls()[-1].reason


def test_a_reader_whose_cost_is_a_lower_bound_waits_for_its_own_backlog() -> None:
    """c's batches are all alike: its μ is a lower bound, and b's forecast alone resizes
    nothing of it. Once what b sends backs c up, c is resized for its own backlog."""
    h = Harness()
    h.feed(pipeline([(0, 200)]))
    assert {control.query_id for control in h.bus.sent_controls()} == {"b"}
    held = h.loop.queries["c"].verdict
    assert held.action == "hold" and held.reason.endswith(
        "not resized on the forecast alone; waiting for its own backlog or a fitted per-batch "
        "cost")
    h.feed(simulate(Job(rates=[(0, 600)], per_unit=200, parallelism=2, max_per_batch=500,
                        overhead_s=0.3, query_id="c", source_topic="b-out", sink_topic="out"),
                    30, start_s=31, first_batch=100), cycles=3)
    assert [control.query_id for control in h.bus.sent_controls()] == ["b", "c"]
    [resized] = [d for d in h.bus.written_decisions()
                 if d.query_id == "c" and d.action == "scale_up"]
    assert resized.figures["backlog"] > SETTINGS.policy.backlog_floor_records


def test_a_recommendation_is_recorded_once_and_counted() -> None:
    h = Harness()
    h.observer = LostRecorder()
    h.loop.ports.observer = h.observer
    full = replace(OVERLOADED, rates=[(0, 5000)], parallelism=16, task_slots=16, partitions=2)
    h.feed(simulate(full, 30), cycles=3)
    assert h.bus.sent_controls() == []
    [advice] = [d for d in h.bus.written_decisions() if d.action == "throttle"]
    assert advice.parameter == "producer_rate" and float(advice.target_value) > 0
    assert "throttle the producers to" in advice.reason
    assert h.observer.recommended_actions == ["throttle"]


class BehindRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.ever_lost: set[str] = set()
        self.judging: list[bool] = []

    def lost(self, query_ids: list[str]) -> None:
        self.ever_lost.update(query_ids)

    def behind(self, seconds: float, judging: bool) -> None:
        self.judging.append(judging)


def test_a_controller_held_behind_its_metrics_judges_no_query_lost_and_says_so() -> None:
    """Six healthy queries batch every second; the controller reads one record per cycle,
    two cycles a second, so it falls further behind each second. Its delay stays out of
    every liveness judgement; past max_input_delay_s it judges nothing (and says so), and
    once it may read freely it catches up and judges again."""
    bus, clock, observer = MemoryBus(), FakeClock(), BehindRecorder()
    source = MemoryMetricsSource(bus.metrics, clock=clock, max_records=1)
    ports = Ports(metrics=source, control=MemoryControlSink(bus.control),
                  acks=MemoryAckSource(bus.acks), decisions=MemoryDecisionLog(bus.decisions),
                  clock=clock, observer=observer)
    loop = ControlLoop(replace(SETTINGS, poll_timeout_s=0.0), ports)
    healthy = [Job(rates=[(0, 100)], per_unit=210, parallelism=2, query_id=f"q{n}")
               for n in range(6)]
    batches = sorted((m for job in healthy for m in simulate(job, 120)),
                     key=lambda m: m.batch_end_ms)

    def run_until(seconds: float) -> None:
        while clock.ms < end_ms(batches[:1]) + int(seconds * 1000):
            due = [m for m in batches if clock.ms - 500 < m.batch_end_ms <= clock.ms]
            bus.publish_metrics(*due)
            loop.run_once()
            clock.advance(0.5)

    run_until(60)  # read at a third of the rate published: ~40 s behind by now
    assert observer.ever_lost == set() and False in observer.judging
    assert not bus.sent_controls()
    [stopped] = [d for d in bus.written_decisions() if d.action == "not_judging"]
    assert "behind its metrics" in stopped.reason and stopped.figures["behind_s"] > 10

    source._max_records = None  # it may read freely: it catches up
    run_until(120)
    assert observer.judging[-1] is True and observer.ever_lost == set()
    assert [d.action for d in bus.written_decisions()
            if d.action in ("judging", "not_judging")] == ["not_judging", "judging"]
    assert all(("modelled", f"q{n}", "2") in observer.events for n in range(6))


def test_at_the_ceiling_a_sheddable_query_gets_a_shed_fraction_tuple() -> None:
    """The verdict becomes a tuple setting shed_fraction (a share of the low-priority records,
    the knob's unit) from the source, a decision naming it, and a wait for its ack."""
    h = Harness()
    full = replace(OVERLOADED, rates=[(0, 5000)], parallelism=16, task_slots=16, partitions=2)
    sheddable = [replace(s, rows_low_priority=s.input_rows, max_shed_fraction=0.9)
                 for s in simulate(full, 30)]
    h.feed(sheddable, cycles=3)
    [control] = h.bus.sent_controls()
    assert (control.parameter, control.operator_id) == ("shed_fraction", "source")
    assert 0 < float(control.value) <= 0.9
    [decision] = [d for d in h.bus.written_decisions() if d.control_id == control.control_id]
    assert (decision.action, decision.current_value, decision.target_value) == (
        "shed", "0", control.value)
    assert "of the low-priority records" in decision.reason
    h.feed(sheddable[-3:], cycles=2)
    assert len(h.bus.sent_controls()) == 1  # in flight: no second tuple
    verdict = h.loop.queries.of("q1").verdict
    assert verdict is not None and f"(shed_fraction {control.value}, epoch" in verdict.reason
