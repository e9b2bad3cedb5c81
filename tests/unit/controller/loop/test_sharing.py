"""A shared cluster's free cores divided at each reading of its status among the wants that
came before it: the priority orders every want of an interval, whichever model was ready a
cycle sooner."""

from __future__ import annotations

from dataclasses import replace

from controller.core.model import QueryModel
from controller.core.parallelism import CORES_WANTED
from controller.core.results import Hold
from controller.core.state import InFlight
from controller.loop.fakes import MemoryCluster
from controller.loop.memory import Memory
from controller.loop.sharing import division, note_demands, note_taken
from schemas.knobs import EXECUTORS

ONE_CORE_BEHIND = QueryModel(
    query_id="", samples=10, config_epoch=0, arrival_rate=150, throughput=30, busy_ratio=1.0,
    rate_per_unit=30, parallelism=2, units=1, source_partitions=2, task_slots=1,
    backlog_records=6_000, backlog_trend_records_per_s=120, time_to_drain_s=float("inf"),
    executor_cores=1, max_executors=2)


def wanting(queries: Memory, cluster: MemoryCluster, *priorities: tuple[str, int]) -> bool:
    """One cycle in which each query named wants one more core; whether a want began."""
    models = {q: replace(ONE_CORE_BEHIND, query_id=q, cluster_priority=p) for q, p in priorities}
    return note_demands(queries, models, {q: Hold("more cores wanted", {CORES_WANTED: 1.0})
                                          for q in models}, cluster.readings())


def test_wants_of_one_interval_are_divided_at_the_next_reading_by_priority() -> None:
    cluster, queries = MemoryCluster(1), Memory()
    wanting(queries, cluster, ("routine", 1))  # its model is ready first
    first = division(cluster, queries)
    assert first is not None and first.grant("routine").pending
    wanting(queries, cluster, ("routine", 1), ("urgent", 5))  # a cycle later, same reading
    second = division(cluster, queries)
    assert second is not None
    assert second.grant("routine").pending and second.grant("urgent").pending

    cluster.read(1)
    divided = division(cluster, queries)

    assert divided is not None
    assert divided.grant("urgent").cores == 1 and not divided.grant("urgent").pending
    routine = divided.grant("routine")
    assert (routine.cores, routine.pending) == (0, False)
    assert routine.note.startswith("the cluster's 1 free core went to urgent (priority 5")


def test_a_want_keeps_the_reading_it_began_at_while_it_lasts_and_an_unread_cluster_divides_none(
        ) -> None:
    cluster, queries = MemoryCluster(None), Memory()
    wanting(queries, cluster, ("q", 0))
    assert division(cluster, queries) is None  # no reading yet: nothing cuts a request
    cluster.read(2)
    wanting(queries, cluster, ("q", 0))  # the same want, noted again after the reading
    divided = division(cluster, queries)
    assert divided is not None and divided.grant("q").cores == 1


def test_only_a_want_that_begins_asks_for_a_reading_not_one_that_goes_on() -> None:
    cluster, queries = MemoryCluster(1), Memory()
    assert wanting(queries, cluster, ("routine", 1))
    assert not wanting(queries, cluster, ("routine", 1))
    assert wanting(queries, cluster, ("routine", 1), ("urgent", 5))
    note_demands(queries, {}, {"routine": Hold("sized", {}), "urgent": Hold("sized", {})},
                 cluster.readings())  # both wants end
    assert wanting(queries, cluster, ("urgent", 5))


def test_cores_an_applied_request_took_stay_taken_until_a_reading_begun_after_its_ack(
        ) -> None:
    cluster, queries = MemoryCluster(1), Memory()
    wanting(queries, cluster, ("first", 5), ("second", 0))
    cluster.read(1)
    first = queries.of("first")
    first.model = replace(ONE_CORE_BEHIND, query_id="first", cluster_priority=5)
    note_taken(first, InFlight("c1", target=2, epoch=1, issued_at_ms=0, current=1,
                               parameter=EXECUTORS), cluster)  # applied: the reading is older
    first.demand = None  # its executors run: it wants no more
    assert cluster.soon == 1  # the others' wants need a reading that shows them

    held = division(cluster, queries)
    assert held is not None
    assert held.grant("second").cores == 0
    assert "first (priority 5, asked already)" in held.grant("second").note

    cluster.read(1)  # a core came free after all: this reading shows the executors
    freed = division(cluster, queries)
    assert freed is not None and freed.grant("second").cores == 1


class ReadMidDivision(MemoryCluster):
    """A reading that comes in while the division reads the status (the reader's thread)."""

    def __init__(self, free: int, then: int) -> None:
        super().__init__(free)
        self.then: int | None = then

    def free_cores(self) -> int | None:
        free = self.free
        if self.then is not None:
            self.read(self.then)  # in after this call's free cores were taken
            self.then = None
        return free


def test_a_reading_that_comes_in_during_the_division_does_not_free_cores_still_held() -> None:
    cluster, queries = ReadMidDivision(1, then=0), Memory()
    wanting(queries, cluster, ("second", 0))
    cluster.read(1)
    first = queries.of("first")
    first.model = replace(ONE_CORE_BEHIND, query_id="first")
    note_taken(first, InFlight("c1", target=2, epoch=1, issued_at_ms=0, current=1,
                               parameter=EXECUTORS), cluster)

    divided = division(cluster, queries)

    assert divided is not None and divided.grant("second").cores == 0
