"""Failover in the controller: the pure decision on hand-built instance sequences, and the loop
on in-memory ports (one promotion per loss, only the promoted instance's ack counts, a
standby is asked for once the last one is gone, a restarted controller waits for the
promotion in flight instead of promoting again)."""

from __future__ import annotations

from dataclasses import replace

from controller.core.failover import NO_STANDBY, decide, standby_advice
from controller.core.instances import Instances, Seen
from controller.core.recovery import History, recover
from controller.core.results import Lost, Promote
from controller.settings import ControllerSettings, PolicySettings
from schemas import Ack, Outcome, Role, TaskMetrics
from tests.unit.controller.loop.test_cycle import Harness
from tests.unit.controller.traces import T0_MS, Job, end_ms, simulate

LOST = Lost("no metrics for 31 s (timeout 25 s: ...); the instance is gone or hung", 31.0,
            25.0, {"silent_s": 31.0, "timeout_s": 25.0})
PATIENT = ControllerSettings(policy=PolicySettings(cooldown_s=30), ack_timeout_s=90)
"""The default ack timeout: a promotion may take a minute on a busy machine."""
STEADY = Job(rates=[(0, 300)], per_unit=210, parallelism=2, instance_id="a")


def seen(instance: str, ago_s: float, role: Role = Role.STANDBY) -> Seen:
    return Seen(instance, role, T0_MS - int(ago_s * 1000))


def beat(instance: str, at_ms: int, role: Role = Role.STANDBY, epoch: int = 0,
         query_id: str = "q1") -> TaskMetrics:
    """A heartbeat as a standby (or an idle active) publishes it."""
    return TaskMetrics(query_id=query_id, instance_id=instance, role=role, config_epoch=epoch,
                       batch_id=-1, batch_start_ms=at_ms, batch_end_ms=at_ms,
                       trigger_interval_ms=1000, input_rows=0, output_rows=0, busy_ms=0,
                       partitions=(), input_parallelism=2, state_partitions=4, task_slots=16)


# -- the pure decision ----------------------------------------------------------------------

def test_the_freshest_live_standby_is_promoted_with_the_reason() -> None:
    verdict = decide(LOST, [seen("s2", 0.5), seen("s1", 2.0)], (), "a", T0_MS)
    assert isinstance(verdict, Promote)
    assert (verdict.instance_id, verdict.lost_instance, verdict.action) == ("s2", "a",
                                                                            "failover")
    assert "active instance a: no metrics for 31 s (timeout 25 s: ...); promoting" in verdict.reason
    assert "promoting standby s2 (heartbeat 0.5 s ago, 2 live standbys)" in verdict.reason
    assert verdict.figures["standbys"] == 2 and verdict.figures["silent_s"] == 31


def test_without_a_standby_the_loss_is_reported_with_advice() -> None:
    verdict = decide(LOST, [], (), "a", T0_MS)
    assert isinstance(verdict, Lost) and verdict.reason == LOST.reason + NO_STANDBY
    assert "streamctl job run --role standby" in verdict.reason


def test_the_lost_instance_beating_as_a_standby_is_promoted_again() -> None:
    """Its promotion failed after it had run as the active, and it beats as a standby: it is
    a candidate like any other live standby, even when no other is left."""
    verdict = decide(LOST, [seen("a", 0.1)], (), "a", T0_MS)
    assert isinstance(verdict, Promote) and (verdict.instance_id, verdict.lost_instance) == (
        "a", "a")
    assert "promoting standby a again (it beats as a standby)" in verdict.reason
    verdict = decide(LOST, [seen("b", 0.5), seen("a", 3.0)], (), "a", T0_MS)
    assert isinstance(verdict, Promote) and verdict.instance_id == "b"  # the freshest first


def test_a_new_standby_is_asked_for_once_when_the_last_one_is_gone() -> None:
    assert standby_advice("q1", before=0, after=0) is None  # never had one: nothing to say
    assert standby_advice("q1", before=2, after=1) is None
    advice = standby_advice("q1", before=1, after=0)
    assert advice is not None and advice.action == "start_standby"
    assert "q1 has no live standby left (it had 1)" in advice.reason


def test_instances_keep_the_newest_word_of_each_and_forget_the_long_silent() -> None:
    table = Instances()
    table.add(beat("s1", T0_MS))
    table.add(beat("s1", T0_MS - 5_000, role=Role.ACTIVE))  # late: changes nothing
    table.add(beat("s2", T0_MS - 9_000))
    assert [s.instance_id for s in table.live_standbys("q1", T0_MS, 8.0)] == ["s1"]
    table.promoted("q1", "s1", T0_MS + 1_000)
    assert table.live_standbys("q1", T0_MS + 1_000, 60.0)[0].instance_id == "s2"
    table.prune(T0_MS + 100_000, forget_after_s=80)
    assert table.queries() == []


# -- the loop -------------------------------------------------------------------------------

def feed_active_then_silence(h: Harness, standbys: tuple[str, ...] = ("s1",)) -> int:
    """30 s of the active's batches with standby heartbeats, then the active stops; returns
    the time of its last batch."""
    trace = simulate(STEADY, 30)
    beats = [beat(s, m.batch_end_ms) for m in trace[::3] for s in standbys]
    h.feed([*trace, *beats])
    return end_ms(trace)


def keep_standbys_alive(h: Harness, seconds: int, standbys: tuple[str, ...] = ("s1",),
                        cycles_per_s: int = 1) -> None:
    for _ in range(seconds):
        h.clock.advance(1)
        h.bus.publish_metrics(*(beat(s, h.clock.now_ms()) for s in standbys))
        h.loop.run(max_cycles=cycles_per_s)


def test_a_silent_active_fails_over_to_the_live_standby_once() -> None:
    h = Harness()
    feed_active_then_silence(h)
    keep_standbys_alive(h, 40)  # lost after 25 s; the ack times out after 20 s more
    [promotion] = h.bus.sent_controls()
    assert (promotion.parameter, promotion.value, promotion.operator_id) == (
        "active_instance", "s1", "query")
    assert promotion.epoch == 1 and "promoting standby s1" in promotion.reason
    flight = h.loop.queries["q1"].state.in_flight  # waiting for the promoted instance's ack
    assert flight is not None and (flight.instance, flight.control_id) == (
        "s1", promotion.control_id)
    [decision] = [d for d in h.bus.written_decisions() if d.action == "failover"]
    assert (decision.current_value, decision.target_value, decision.control_id) == (
        "a", "s1", promotion.control_id)


def test_only_the_promoted_instance_answers_a_promotion() -> None:
    h = Harness()
    feed_active_then_silence(h)
    keep_standbys_alive(h, 40)
    [promotion] = h.bus.sent_controls()
    now = h.clock.now_ms()
    h.bus.publish_ack(Ack(promotion.control_id, "q1", "a", 1, Outcome.APPLIED,
                          "a stepped down", 0, now))
    h.loop.run(max_cycles=1)
    # The former active's ack settles nothing.
    assert h.loop.queries["q1"].state.in_flight is not None
    h.bus.publish_ack(Ack(promotion.control_id, "q1", "s1", 1, Outcome.APPLIED,
                          "promoted s1", 7_000, now))
    h.loop.run(max_cycles=1)
    state = h.loop.queries["q1"].state
    assert state.in_flight is None and state.cooldown_until_ms > now
    actions = [d.action for d in h.bus.written_decisions()]
    assert actions[-2:] == ["ack_applied", "start_standby"], actions
    # The promoted instance reports as the active at the new epoch: not lost, no new tuple.
    promoted = Job(rates=[(0, 300)], per_unit=210, parallelism=2, instance_id="s1", epoch=1)
    start_s = (h.clock.now_ms() - T0_MS) / 1000
    h.feed(simulate(promoted, 30, start_s=start_s, first_batch=40), cycles=3)
    assert h.loop.queries["q1"].verdict.action not in ("lost", "failover")
    assert len(h.bus.sent_controls()) == 1


def test_a_standby_whose_promotion_failed_is_tried_again_after_a_wait_that_doubles() -> None:
    """A failure that lasts (say, a checkpoint the standby cannot continue) is not retried
    every cycle: 30 s, then 60 s, and the loss says why nothing is promoted meanwhile."""
    h = Harness()
    feed_active_then_silence(h)
    failed_at: list[int] = []
    promoted_at: list[int] = []
    for _ in range(150):
        keep_standbys_alive(h, 1)
        sent = h.bus.sent_controls()
        if len(sent) > len(promoted_at):
            promotion = sent[-1]
            assert promotion.parameter == "active_instance" and promotion.value == "s1"
            promoted_at.append(h.clock.now_ms())
            h.bus.publish_ack(Ack(promotion.control_id, "q1", "s1", promotion.epoch,
                                  Outcome.FAILED, "promotion failed (checkpoint unreadable); "
                                  "s1 stays a standby", 0, h.clock.now_ms()))
            h.loop.run(max_cycles=1)
            failed_at.append(h.clock.now_ms())
    waits = [round((at - failed) / 1000)
             for at, failed in zip(promoted_at[1:], failed_at, strict=False)]
    assert waits[:2] == [30, 60], waits
    held = [d.reason for d in h.bus.written_decisions() if d.action == "lost"]
    assert held and ("standby s1 failed its promotion once (promotion failed (checkpoint "
                     "unreadable); s1 stays a standby); tried again in") in held[0], held


def test_a_promoted_standby_whose_run_failed_after_it_beat_as_the_active_is_promoted_again(
        ) -> None:
    """s1, promoted, beats as the active, then its run fails before its first commit: it acks
    FAILED and beats as a standby again, the query's only one. It is held off, then promoted
    again, and its APPLIED ack settles that promotion."""
    h = Harness(PATIENT)
    feed_active_then_silence(h)
    keep_standbys_alive(h, 40)
    [first] = h.bus.sent_controls()
    for _ in range(3):
        h.clock.advance(1)
        h.bus.publish_metrics(beat("s1", h.clock.now_ms(), Role.ACTIVE, epoch=first.epoch))
        h.loop.run(max_cycles=1)
    h.bus.publish_ack(Ack(first.control_id, "q1", "s1", first.epoch, Outcome.FAILED,
                          "promotion failed (its first batch failed); s1 stays a standby", 0,
                          h.clock.now_ms()))
    h.loop.run(max_cycles=1)
    failed_ms = h.clock.now_ms()
    window = h.loop._windows.get("q1")
    assert window is not None and window.last_instance == "s1"  # what makes it the lost one
    keep_standbys_alive(h, 20)
    assert len(h.bus.sent_controls()) == 1  # held off
    keep_standbys_alive(h, 30)
    again = h.bus.sent_controls()[-1]
    assert (again.parameter, again.value, again.epoch) == ("active_instance", "s1",
                                                           first.epoch + 1)
    assert h.clock.now_ms() - failed_ms >= 30_000
    h.bus.publish_ack(Ack(again.control_id, "q1", "s1", again.epoch, Outcome.APPLIED,
                          "promoted s1", 0, h.clock.now_ms()))
    h.loop.run(max_cycles=1)
    assert h.loop.queries["q1"].state.in_flight is None


def test_without_a_standby_the_controller_only_reports_the_loss() -> None:
    h = Harness()
    feed_active_then_silence(h, standbys=())
    keep_standbys_alive(h, 40, standbys=())
    assert h.bus.sent_controls() == []
    [lost] = [d for d in h.bus.written_decisions() if d.action == "lost"]
    assert lost.reason.endswith(NO_STANDBY)


def test_a_restarted_controller_waits_for_the_promotion_in_flight() -> None:
    old = Harness(PATIENT)
    feed_active_then_silence(old)
    keep_standbys_alive(old, 40)
    [promotion] = old.bus.sent_controls()
    # The old controller dies; the former active's step-down ack is on the topic already.
    restart_ms = old.clock.now_ms() + 5_000
    step_down = Ack(promotion.control_id, "q1", "a", 1, Outcome.APPLIED, "stepped down", 0,
                    restart_ms - 1_000)
    history = History(tuple(old.bus.sent_controls()), (step_down,),
                      tuple(old.bus.written_decisions()))
    recovered = recover(history, restart_ms, issuer=PATIENT.issuer,
                        cooldown_s=PATIENT.policy.cooldown_s,
                        ack_timeout_s=PATIENT.ack_timeout_s)
    flight = recovered.states["q1"].in_flight
    assert flight is not None and (flight.instance, flight.epoch) == ("s1", 1)
    new = Harness(PATIENT)
    new.clock.ms = restart_ms
    for query_id, state in recovered.states.items():
        new.loop.queries.of(query_id).state = state
    # It hears the old active's last batches (its group's committed offset) and the standby.
    new.bus.publish_metrics(*simulate(STEADY, 30))
    keep_standbys_alive(new, 20, standbys=())  # s1 is busy promoting (an empty poll is 1 s more)
    assert new.loop.queries["q1"].state.in_flight == flight
    assert new.bus.sent_controls() == []  # no second promotion while the first is in flight
    new.bus.publish_ack(Ack(promotion.control_id, "q1", "s1", 1, Outcome.APPLIED, "promoted",
                            9_000, new.clock.now_ms()))
    new.loop.run(max_cycles=1)
    assert new.loop.queries["q1"].state.in_flight is None
    assert new.bus.sent_controls() == []
    # It never heard s1 as a standby after the restart, yet s1 was one: ask for a new one.
    assert [d.action for d in new.bus.written_decisions()][-2:] == ["ack_applied",
                                                                    "start_standby"]


def test_a_just_started_controller_counts_silence_only_from_its_start() -> None:
    """Metrics read back from before the start are history, not silence it watched."""
    h = Harness()
    h.clock.ms = T0_MS + 600_000  # ten minutes after the active's last batch
    h.bus.publish_metrics(*simulate(STEADY, 30))
    h.bus.publish_metrics(beat("s1", h.clock.now_ms()))
    h.loop.run(max_cycles=1)
    assert h.loop.queries["q1"].verdict.action != "lost" and h.bus.sent_controls() == []
    keep_standbys_alive(h, 30)
    assert [t.value for t in h.bus.sent_controls()] == ["s1"]


def test_a_standby_that_stopped_on_purpose_is_no_longer_live() -> None:
    table = Instances()
    table.add(beat("s1", T0_MS))
    table.add(replace(beat("s1", T0_MS + 1_000), stopped=True))
    assert table.live_standbys("q1", T0_MS + 1_000, 8.0) == []
