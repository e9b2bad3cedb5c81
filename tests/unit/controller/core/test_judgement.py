"""Judgement on hand-built figures: overhead-aware sizing and scale-down, the batch-cap and
throttle recommendations, skew, lost queries, and the memory of scale-ups that did not help."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.core.batches import PartitionShares
from controller.core.judgement import judge_effect, liveness, lost_timeout_s, skew
from controller.core.model import QueryModel
from controller.core.policy import decide
from controller.core.results import Hold, Lost, Recommend, Scale
from controller.core.state import ControlState, EffectCheck, InFlight
from controller.core.topology import plan, topological_order, upstreams
from controller.settings import PolicySettings

NOW = 1_700_000_000_000
POLICY = PolicySettings(change_prior_s=0)  # the backlog of the change aside (test_policy)


def model(**changes: Any) -> QueryModel:
    """2 units of μ 200/s, 1.5 s per batch of at most 4 000 (capacity 348/s), 800/s arriving,
    10 000 records behind and growing: the bundled job after a 4× step."""
    base = QueryModel(
        query_id="q1", samples=10, config_epoch=0, arrival_rate=800, throughput=348,
        busy_ratio=1.0, rate_per_unit=200, parallelism=2, units=2, source_partitions=2,
        task_slots=16, backlog_records=10_000, backlog_trend_records_per_s=450,
        time_to_drain_s=math.inf, batch_overhead_s=1.5, overhead_source="fit",
        batch_cap=4000, batch_cap_source="reported", recent_throughput=348,
        source_topics=("in",), sink_topics=("out",),
        partition_lag_shares=PartitionShares.listed(("in/0", 0.5), ("in/1", 0.5)),
        partition_arrival_shares=PartitionShares.listed(("in/0", 0.5), ("in/1", 0.5)))
    return replace(base, **changes)


def test_sizing_counts_the_per_batch_overhead() -> None:
    verdict = decide(model(), ControlState(), NOW, POLICY)
    # D = 800 + 10 000 / 60 = 967/s; p ≥ 967 · 4000 / (200 (0.7 · 4000 − 967 · 1.5)) = 14.3
    assert isinstance(verdict, Scale) and verdict.target == 15
    assert "1.5 s per batch of 4 000" in verdict.reason
    assert verdict.figures["batch_overhead_s"] == 1.5 and verdict.figures["required"] == 15


def test_a_small_load_on_many_units_scales_down_once_the_overhead_is_known() -> None:
    """With the overhead charged to the records (59/s per unit) this query looked busy
    forever; with it separated, 150/s on 12 units is plainly quiet."""
    quiet = model(parallelism=12, units=12, arrival_rate=150, backlog_records=300,
                  backlog_trend_records_per_s=0, time_to_drain_s=0.2)
    assert quiet.utilisation < POLICY.low_water_utilisation
    verdict = decide(quiet, ControlState(quiet_since_ms=NOW - 130_000), NOW, POLICY)
    # 2 units would do; at most three quarters of the 12 removed at once.
    assert isinstance(verdict, Scale) and (verdict.current, verdict.target) == (12, 3)


def test_when_the_overhead_dominates_a_bigger_batch_cap_is_recommended() -> None:
    # 0.7 × 1 000 records per batch ≤ 1 500/s × 1.5 s: no number of units can.
    verdict = decide(model(batch_cap=1000, arrival_rate=1500, backlog_records=0),
                     ControlState(), NOW, POLICY)
    assert isinstance(verdict, Recommend) and verdict.action == "raise_batch_cap"
    assert verdict.parameter == "max_offsets_per_trigger" and verdict.value > 1000
    assert "raise max_offsets_per_trigger to at least" in verdict.reason
    assert "at most 667/s through however many units run" in verdict.reason


def test_at_the_slots_a_throttle_is_recommended_instead_of_silence() -> None:
    verdict = decide(model(parallelism=16, units=16, arrival_rate=2600, backlog_records=0,
                           batch_cap=40_000), ControlState(), NOW, POLICY)
    assert isinstance(verdict, Recommend) and verdict.action == "throttle"
    top = verdict.figures["capacity_at_max"]
    assert verdict.value == pytest.approx(0.7 * top)
    # 40 000 / (1.5 + 40 000 / 3 200) = 2 857/s; at 70 % that is 2 000/s of the 2 600/s.
    assert verdict.reason.startswith(
        "at 16 units (task slots) capacity is 2 857/s against 2 600/s arriving and 0 records "
        "behind; throttle the producers to 2 000/s (keeps 70% utilisation")
    assert "nothing to shed: the job marks no record low priority" in verdict.reason


def test_skew_is_named_with_the_partition_and_its_share() -> None:
    hot = model(partition_lag_shares=PartitionShares.listed(("in/0", 0.95), ("in/1", 0.05)))
    found = skew(hot, POLICY)
    assert found is not None and (found.partition, found.of) == ("in/0", "backlog")
    verdict = decide(hot, ControlState(), NOW, POLICY)
    assert "skew: partition in/0 holds 95% of the backlog across 2 partitions" in verdict.reason
    assert skew(model(), POLICY) is None
    single = model(partition_lag_shares=PartitionShares.listed(("in/0", 1.0)))
    assert skew(single, POLICY) is None  # one partition: nothing to be uneven across


def test_an_ineffective_scale_up_is_remembered_and_not_repeated() -> None:
    # 4 → 12 units should have nearly doubled capacity (the overhead caps it); μ fell so
    # that capacity rose ~8 % instead: skew or an external limit.
    check = EffectCheck(current=4, target=12, rate_per_unit=200, batch_overhead_s=1.5)
    after = model(parallelism=12, units=12, rate_per_unit=200 * 4 * 1.08 / 12)
    state = judge_effect(ControlState(effect_check=check), after, True, NOW, POLICY)
    memory = state.ineffective
    assert state.effect_check is None and memory is not None
    assert (memory.current, memory.target) == (4, 12) and memory.measured_gain < 0.2
    verdict = decide(after, state, NOW, POLICY)
    assert isinstance(verdict, Hold) and verdict.action == "cannot_help"
    assert verdict.reason.startswith("cannot help: scaling 4→12 raised capacity only ")
    assert "likely skew or an external limit" in verdict.reason
    later = decide(after, state, memory.until_ms, POLICY)
    assert isinstance(later, Scale)  # the memory expires


def test_a_shortfall_that_contention_explains_is_not_remembered_as_ineffective() -> None:
    """2 → 9 units predicted ~4.5× the capacity; μ fell from 213 to 100/s a unit, so it rose
    ~2.1×: each unit brought less (contention ~0.12, as this machine measures), but each
    brought something. The next step is sized on the curve, not refused for 30 minutes."""
    check = EffectCheck(current=2, target=9, rate_per_unit=213, batch_overhead_s=0.0)
    after = model(parallelism=9, units=9, rate_per_unit=100, overhead_source="fit")
    state = judge_effect(ControlState(effect_check=check), after, True, NOW, POLICY)
    assert state.effect_check is None and state.ineffective is None
    bound = replace(after, overhead_source="assumed_zero")  # a lower bound: no evidence
    assert judge_effect(ControlState(effect_check=check), bound, True, NOW,
                        POLICY).ineffective is not None


def test_a_shortfall_with_mu_unchanged_is_no_contention_and_is_remembered_as_ineffective(
        ) -> None:
    """μ a unit as before, but each batch now costs 12 s of overhead: capacity barely rose,
    and no contention explains it (an external limit)."""
    check = EffectCheck(current=2, target=9, rate_per_unit=213, batch_overhead_s=1.5)
    limited = model(parallelism=9, units=9, rate_per_unit=213, batch_overhead_s=12.0)
    state = judge_effect(ControlState(effect_check=check), limited, True, NOW, POLICY)
    assert state.ineffective is not None


def test_a_scale_up_whose_batch_cap_grew_with_it_is_judged_against_the_old_sizes_cap(
        ) -> None:
    """4 → 12 units with the cap following them, 1 000 → 3 000 records (250 a unit). The
    overhead grew from 1.5 to 2.5 s a batch: capacity rose from 364/s to 800/s, 60 % of the
    predicted gain, which is enough. Under today's cap the old size would have made 571/s and
    the same rise would read as 44 %: ineffective."""
    check = EffectCheck(current=4, target=12, rate_per_unit=200, batch_overhead_s=1.5)
    after = model(parallelism=12, units=12, rate_per_unit=200, batch_overhead_s=2.5,
                  batch_cap=3000, batch_cap_per_unit=250.0, max_batch_cap=100_000)
    assert judge_effect(ControlState(effect_check=check), after, True, NOW,
                        POLICY).ineffective is None
    fixed_cap = replace(after, batch_cap_per_unit=0.0)
    assert judge_effect(ControlState(effect_check=check), fixed_cap, True, NOW,
                        POLICY).ineffective is not None
    # The cap in force when the scale-up was sent, kept with the check, is the old size's.
    kept = replace(check, batch_cap=1000)
    assert judge_effect(ControlState(effect_check=kept), fixed_cap, True, NOW,
                        POLICY).ineffective is None


def test_a_scale_up_that_cleared_the_backlog_is_never_judged_ineffective() -> None:
    check = EffectCheck(4, 12, 200, 1.5)
    weak = model(parallelism=12, units=12, rate_per_unit=50)
    assert judge_effect(ControlState(effect_check=check), weak, False, NOW,
                        POLICY).ineffective is None
    effective = model(parallelism=12, units=12)
    assert judge_effect(ControlState(effect_check=check), effective, True, NOW,
                        POLICY).ineffective is None


def test_a_silent_query_is_lost_after_its_timeout_but_not_while_restarting() -> None:
    assert lost_timeout_s(2.0, 0.5, POLICY) == 25.0  # the floor: idle heartbeats are 10 s apart
    assert lost_timeout_s(2.0, 12.0, POLICY) == 60.0  # 5 × a 12 s backlogged batch
    last = NOW - 26_000
    lost = liveness(last, 2.0, 0.5, ControlState(), NOW, POLICY)
    assert isinstance(lost, Lost) and lost.action == "lost"
    assert lost.reason.startswith("no metrics for 26 s (timeout 25 s")
    assert liveness(last, 2.0, 12.0, ControlState(), NOW, POLICY) is None
    assert liveness(None, 2.0, 0.5, ControlState(), NOW, POLICY) is None
    flying = ControlState(in_flight=InFlight("c", 4, 1, NOW - 60_000))
    assert liveness(last, 2.0, 0.5, flying, NOW, POLICY) is None
    restarted = ControlState(settled_at_ms=NOW - 10_000)
    assert liveness(last, 2.0, 0.5, restarted, NOW, POLICY) is None


def pipeline(**middle: Any) -> dict[str, QueryModel]:
    """a → b → c after a 4× step: a and b backlogged, c fed only what b lets through."""
    a = model(query_id="a", sink_topics=("a-out",), arrival_rate=400, backlog_records=3000,
              recent_throughput=308, batch_cap=2000)
    b = model(query_id="b", source_topics=("a-out",), sink_topics=("b-out",), rate_per_unit=100,
              arrival_rate=308, throughput=174, recent_throughput=174, backlog_records=2000,
              backlog_trend_records_per_s=130, batch_cap=2000, **middle)
    c = model(query_id="c", source_topics=("b-out",), sink_topics=("out",), rate_per_unit=150,
              arrival_rate=174, throughput=174, recent_throughput=174, backlog_records=100,
              backlog_trend_records_per_s=0, time_to_drain_s=1, batch_cap=2000)
    return {"c": c, "b": b, "a": a}


def test_a_pipeline_is_sized_together_in_topological_order() -> None:
    models = pipeline()
    ups = upstreams(models)
    assert ups == {"a": [], "b": ["a"], "c": ["b"]}
    assert topological_order(ups) == ["a", "b", "c"]
    verdicts = plan(models, {}, NOW, POLICY)
    assert all(isinstance(v, Scale) for v in verdicts.values()), verdicts
    c = verdicts["c"]
    assert isinstance(c, Scale) and "b will send" in c.reason
    # c alone (174/s on 245/s of capacity) would hold; sized with b's projected output it
    # gets enough for a's full rate plus the backlogs upstream.
    alone = plan({"c": models["c"]}, {}, NOW, POLICY)["c"]
    assert isinstance(alone, Hold)
    assert c.figures["inflow"] > 200 and c.target >= 5


def test_an_upstream_in_flight_still_projects_its_new_size() -> None:
    models = pipeline()
    states = {"a": ControlState(in_flight=InFlight("x", 6, 1, NOW)),
              "b": ControlState(in_flight=InFlight("y", 12, 1, NOW))}
    verdicts = plan(models, states, NOW, POLICY)
    assert isinstance(verdicts["a"], Hold) and isinstance(verdicts["b"], Hold)
    assert isinstance(verdicts["c"], Scale)


def test_a_steady_upstream_projects_nothing_and_cycles_do_not_hang() -> None:
    steady = model(query_id="up", backlog_records=0, backlog_trend_records_per_s=0,
                   arrival_rate=200, time_to_drain_s=0)
    down = model(query_id="down", source_topics=("out",), sink_topics=("in",),
                 arrival_rate=200, backlog_records=0, backlog_trend_records_per_s=0,
                 time_to_drain_s=0)
    verdicts = plan({"up": steady, "down": down}, {}, NOW, POLICY)  # a cycle: up ⇄ down
    assert set(verdicts) == {"up", "down"}
    assert all(isinstance(v, Hold) for v in verdicts.values())


@given(st.dictionaries(st.sampled_from("abcdefgh"), st.sets(st.sampled_from("abcdefgh")),
                       max_size=8))
def test_the_topological_order_puts_every_upstream_first_the_smallest_name_first_and_cycles_last(
        links: dict[str, set[str]]) -> None:
    """Each query comes after its upstreams; among those free to go next, the smallest name
    goes; what waits on a cycle comes last in name order."""
    ups = {q: sorted(u - {q}) for q, u in links.items()}
    order = topological_order(ups)
    assert sorted(order) == sorted(ups)
    placed: list[str] = []
    for index, query in enumerate(order):
        free = sorted(q for q in ups if q not in placed and all(u in placed for u in ups[q]))
        if not free:  # only queries waiting on a cycle (or on one that never comes) are left
            assert order[index:] == sorted(order[index:])
            break
        assert query == free[0]
        placed.append(query)
