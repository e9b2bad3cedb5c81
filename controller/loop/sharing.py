"""The shared Spark cluster's free cores, divided among the queries' wants (`core.cluster`).

Owns what each query wants of the cluster from one cycle to the next (`QueryMemory.demand`,
kept with the rest of the query's record, forgotten with it) and the division of each cycle:
what each query's verdict last named, and what an executors tuple still in flight asked for
(the master may not have started those executors yet). Neighbours: `cycle` divides before
it models and notes the wants after it decides; the model carries its grant.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.core.cluster import MAX_NEED, Demand, Division, divide
from controller.core.model import QueryModel
from controller.core.parallelism import CORES_WANTED
from controller.core.results import NotReady, Verdict
from controller.loop.memory import Memory
from schemas.knobs import EXECUTORS


def division(free_cores: int | None, queries: Memory) -> Division | None:
    """The free cores divided among the queries' wants; None when the cluster's status is
    unknown, and then nothing cuts an executor request."""
    if free_cores is None:
        return None
    demands = []
    for query_id, query in queries.items():
        flight, model = query.state.in_flight, query.model
        if flight is not None and flight.parameter == EXECUTORS and model is not None:
            demands.append(Demand(
                query_id, max(0, flight.target - flight.current) * model.executor_cores,
                model.cluster_priority, asked=True))
        elif query.demand is not None:
            demands.append(query.demand)
    return divide(free_cores, demands)


def note_demands(queries: Memory, ready: Mapping[str, QueryModel],
                 verdicts: Mapping[str, Verdict]) -> None:
    """Each query decided this cycle wants the cores its verdict names (`CORES_WANTED`);
    one lost, down or not ready wants none."""
    for query_id, verdict in verdicts.items():
        model = ready.get(query_id)
        cores = (0.0 if model is None or isinstance(verdict, NotReady)
                 else verdict.figures.get(CORES_WANTED, 0.0))
        queries.of(query_id).demand = (
            Demand(query_id, int(cores), model.cluster_priority,
                   min(model.utilisation, MAX_NEED))
            if model is not None and cores > 0 else None)
