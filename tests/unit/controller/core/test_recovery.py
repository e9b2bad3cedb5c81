"""A restarted controller resumes from its own history: it repeats and contradicts nothing."""

from __future__ import annotations

from controller.core.recovery import History, recorded_memories, recover
from controller.core.state import ControlState
from schemas import Decision, Outcome
from tests.unit.controller.loop.test_cycle import OVERLOADED, SETTINGS, Harness
from tests.unit.controller.traces import simulate

COOLDOWN_S, ACK_TIMEOUT_S = SETTINGS.policy.cooldown_s, SETTINGS.ack_timeout_s


def history_of(h: Harness) -> History:
    """What the previous controller left on its topics."""
    return History(tuples=tuple(h.bus.sent_controls()), acks=tuple(h.bus.acks_published()),
                   decisions=tuple(h.bus.written_decisions()))


def restarted(h: Harness, now_ms: int) -> Harness:
    """A new controller process, seeded from the old one's history at `now_ms`."""
    fresh = Harness()
    fresh.clock.ms = now_ms
    recovered = recover(history_of(h), now_ms, issuer=SETTINGS.issuer, cooldown_s=COOLDOWN_S,
                        ack_timeout_s=ACK_TIMEOUT_S)
    for query_id, state in recovered.states.items():
        fresh.loop.queries.of(query_id).state = state
    return fresh


def first_decision() -> tuple[Harness, int]:
    h = Harness()
    h.feed(simulate(OVERLOADED, 30))
    return h, h.clock.now_ms()


def test_an_unanswered_tuple_is_still_awaited_after_a_restart_and_not_sent_again() -> None:
    old, sent_at = first_decision()
    [control] = old.bus.sent_controls()
    new = restarted(old, sent_at + 5_000)
    flight = new.loop.queries["q1"].state.in_flight
    assert flight is not None and (flight.control_id, flight.epoch) == (control.control_id, 4)
    assert (flight.current, flight.target) == (2, int(control.value))
    new.feed(simulate(OVERLOADED, 40), cycles=3)
    assert new.bus.sent_controls() == []  # still waiting for that ack


def test_an_ack_given_while_no_controller_ran_starts_the_cooldown_from_the_ack() -> None:
    old, sent_at = first_decision()
    old.clock.ms = sent_at + 4_000
    old.ack(Outcome.APPLIED)
    new = restarted(old, sent_at + 10_000)
    state = new.loop.queries["q1"].state
    assert state.in_flight is None
    assert state.cooldown_until_ms == sent_at + 4_000 + int(COOLDOWN_S * 1000)
    assert state.effect_check is not None and state.effect_check.target > 2
    new.feed(simulate(OVERLOADED, 40), cycles=3)  # still overloaded, but cooling down
    assert new.bus.sent_controls() == []


def test_after_the_cooldown_the_next_tuple_continues_the_epochs() -> None:
    old, sent_at = first_decision()
    old.clock.ms = sent_at + 1_000
    old.ack(Outcome.REJECTED)  # e.g. the job said no; the metrics still show the overload
    new = restarted(old, sent_at + 1_000 + int(COOLDOWN_S * 1000) + 1_000)
    trace = [m for m in simulate(OVERLOADED, 90) if m.batch_end_ms <= new.clock.ms + 60_000]
    new.bus.publish_metrics(*trace)
    new.loop.run(max_cycles=2)
    [control] = new.bus.sent_controls()
    assert control.epoch == 5  # above the 4 the previous run issued


def test_a_tuple_never_answered_counts_as_timed_out() -> None:
    old, sent_at = first_decision()
    now = sent_at + int((ACK_TIMEOUT_S + 5) * 1000)
    state = recover(history_of(old), now, issuer=SETTINGS.issuer, cooldown_s=COOLDOWN_S,
                    ack_timeout_s=ACK_TIMEOUT_S).states["q1"]
    timed_out_at = sent_at + int(ACK_TIMEOUT_S * 1000)
    assert state == ControlState(last_epoch_issued=4, settled_at_ms=timed_out_at,
                                 cooldown_until_ms=timed_out_at + int(COOLDOWN_S * 1000))


def test_tuples_of_another_issuer_are_not_taken_as_our_own() -> None:
    old, sent_at = first_decision()
    recovered = recover(history_of(old), sent_at, issuer="someone-else", cooldown_s=COOLDOWN_S,
                        ack_timeout_s=ACK_TIMEOUT_S)
    assert recovered.states == {}


def test_the_summary_says_what_was_resumed() -> None:
    old, sent_at = first_decision()
    recovered = recover(history_of(old), sent_at + 1_000, issuer=SETTINGS.issuer,
                        cooldown_s=COOLDOWN_S, ack_timeout_s=ACK_TIMEOUT_S)
    [line] = recovered.summary
    assert line.startswith("q1: last tuple input_parallelism=") and "unanswered" in line


def figures_at(query_id: str, at_ms: int, **figures: float) -> Decision:
    return Decision(f"d-{at_ms}", query_id, at_ms, "scale_up", "input_parallelism", "2", "4",
                    "earlier", {"rate_samples": 5.0} | figures)


def test_the_decision_logs_figures_give_each_querys_memories_newest_last() -> None:
    log = (figures_at("q1", 3_000, units=2.0, processing_rate_per_unit=190.0,
                      batch_overhead_s=0.8, overhead_fitted=1.0, batch_cap_per_unit=700.0),
           figures_at("q1", 1_000, units=2.0, processing_rate_per_unit=250.0,
                      batch_overhead_s=1.5, overhead_fitted=1.0, batch_cap_per_unit=500.0),
           figures_at("q1", 2_000, units=8.0, processing_rate_per_unit=120.0,
                      batch_overhead_s=1.1, useful_share=0.81),
           # c remembered, not fitted: a size, not a cost, while records took 81 % of the
           # busy time; at 4 units only 33 %: another size's c was most of the measure
           figures_at("q1", 2_500, units=4.0, processing_rate_per_unit=150.0,
                      batch_overhead_s=1.1, useful_share=0.33),
           figures_at("q1", 4_000, units=16.0, processing_rate_per_unit=60.0,
                      batch_overhead_s=0.0),  # μ a lower bound: no measurement of 16
           # A remembered c of exactly 0 (fitted so at another size): a size all the same
           figures_at("q1", 3_500, units=6.0, processing_rate_per_unit=170.0,
                      batch_overhead_s=0.0, overhead_remembered=1.0, useful_share=1.0),
           figures_at("q2", 1_000, units=4.0, processing_rate_per_unit=0.0),
           )
    memories = recorded_memories(log)
    assert set(memories) == {"q1"}  # q2's figures hold nothing to remember
    q1 = memories["q1"]
    # Oldest first: 2 measured again after 8, 6 last.
    assert q1.sizes == ((8, 120.0), (2, 190.0), (6, 170.0))
    # The cost and the cap ratio are carried from the newest fitted decision, not the older.
    newest = log[0].figures
    assert (q1.overhead_s, q1.batch_cap_per_unit) == (newest["batch_overhead_s"],
                                                      newest["batch_cap_per_unit"])
