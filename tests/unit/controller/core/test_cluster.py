"""A shared cluster's free cores divided among the queries that want more: requests in
flight first, then by priority, then by need, each granted what it wants while cores last."""

from __future__ import annotations

from controller.core.cluster import CoreGrant, Demand, divide


def granted(free: int, *demands: Demand) -> dict[str, int]:
    return {q: g.cores for q, g in divide(free, demands).grants.items()}


def test_higher_priority_first_then_the_needier_then_the_query_id() -> None:
    demands = (Demand("low", 3, priority=0, need=3.0), Demand("high", 3, priority=2, need=1.1),
               Demand("b", 2, priority=1, need=1.5), Demand("a", 2, priority=1, need=1.5),
               Demand("needy", 2, priority=1, need=2.0))
    assert granted(8, *demands) == {"high": 3, "needy": 2, "a": 2, "b": 1, "low": 0}


def test_a_request_in_flight_keeps_its_cores_whatever_its_priority() -> None:
    asked = Demand("asked", 2, priority=0, need=1.0, asked=True)
    assert granted(3, Demand("urgent", 3, priority=9, need=5.0), asked) == {
        "asked": 2, "urgent": 1}


def test_each_gets_no_more_than_it_wants_and_a_newcomer_waits_for_the_next_division() -> None:
    division = divide(6, (Demand("a", 1), Demand("b", 2)))
    assert {q: g.cores for q, g in division.grants.items()} == {"a": 1, "b": 2}
    assert division.left == 3 and division.grant("newcomer") == CoreGrant(
        3, "the cluster's 6 free cores went to a (priority 0, arrival 0% of its capacity), b "
        "(priority 0, arrival 0% of its capacity) first; 3 cores left for this query",
        pending=True)
    assert divide(-1, (Demand("a", 1),)).grant("a").cores == 0  # a master counting oddly


def test_a_query_cut_short_is_told_who_took_the_cores_and_one_served_is_told_nothing() -> None:
    division = divide(2, (Demand("fraud", 2, priority=1, need=1.4), Demand("sensor", 2)))
    assert division.grant("fraud").note == ""
    assert division.grant("sensor").note == (
        "the cluster's 2 free cores went to fraud (priority 1, arrival 140% of its capacity) "
        "first")
    assert divide(3, (Demand("fraud", 2, asked=True), Demand("sensor", 2))).grant(
        "sensor").note == ("the cluster's 3 free cores went to fraud (priority 0, asked "
                           "already) first; 1 core left for this query")
    assert divide(0, (Demand("sensor", 2),)).grant("sensor").note == (
        "the cluster has 0 free cores")
