"""Pipelines: jobs chained through topics, sized together in one round.

Owns the topology (discovered from the `source_topics` / `sink_topics` each query reports:
an edge runs from a query whose sink topic another query reads) and `plan`, which decides
every query in topological order. Pure; `loop` calls `plan` once per cycle with all ready
models, so one round sends one tuple per query that needs one.

Why: when a middle job is the bottleneck it passes on only what it can process, so nothing
in the next job's own metrics says what it will receive once the middle job is fixed. Each
query's projected output is handed to its readers as extra arrivals:

    processed' = min(capacity(units'), λ + inflow + B / catch_up_s)
    inflow(downstream) = Σ_upstreams max(0, selectivity × (processed' − recent throughput))

where units' is the upstream's new size (its `Scale` target, or the target in flight) and
the recent throughput is what the downstream sees arriving now. Only an upstream that is
being resized or is backlogged projects anything: otherwise its output is already in the
downstream's λ, and projecting from noisy rates would only add noise. A negative difference
is not projected either: a downstream is never sized down on a forecast. Queries in a cycle
(a topology error) are decided last, without inflow.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.model import QueryModel, effective_units
from controller.policy import decide, demand
from controller.results import Scale, Verdict
from controller.settings import PolicySettings
from controller.state import ControlState


def upstreams(models: Mapping[str, QueryModel]) -> dict[str, list[str]]:
    """Per query, the queries whose sink topics it reads (sorted, itself excluded)."""
    writers: dict[str, set[str]] = {}
    for query_id, model in models.items():
        for topic in model.sink_topics:
            writers.setdefault(topic, set()).add(query_id)
    return {q: sorted({w for t in m.source_topics for w in writers.get(t, ())} - {q})
            for q, m in models.items()}


def topological_order(ups: Mapping[str, list[str]]) -> list[str]:
    """Upstreams before downstreams (Kahn's algorithm, ties by name for determinism);
    queries on a cycle come last, in name order."""
    waiting = {q: set(u) for q, u in ups.items()}
    order: list[str] = []
    ready = sorted(q for q, u in waiting.items() if not u)
    while ready:
        query = ready.pop(0)
        order.append(query)
        for other, pending in waiting.items():
            if query in pending:
                pending.discard(query)
                if not pending and other not in order:
                    ready.append(other)
        ready.sort()
    return order + sorted(q for q in waiting if q not in order)


def plan(models: Mapping[str, QueryModel], states: Mapping[str, ControlState], now_ms: int,
         settings: PolicySettings) -> dict[str, Verdict]:
    """Every ready query's verdict, upstreams first, each downstream sized for what its
    upstreams will send once they are resized."""
    ups = upstreams(models)
    verdicts: dict[str, Verdict] = {}
    extra_out: dict[str, float] = {}
    for query_id in topological_order(ups):
        model, state = models[query_id], states.get(query_id, ControlState())
        senders = [u for u in ups[query_id] if extra_out.get(u, 0.0) > 0]
        inflow = sum(extra_out[u] for u in senders)
        verdict = decide(model, state, now_ms, settings, inflow, " and ".join(senders))
        verdicts[query_id] = verdict
        extra_out[query_id] = projected_extra_output(model, state, verdict, inflow, settings)
    return verdicts


def projected_extra_output(model: QueryModel, state: ControlState, verdict: Verdict,
                           inflow: float, settings: PolicySettings) -> float:
    """Records/s more than now that this query will write once resized (module docstring)."""
    if isinstance(verdict, Scale):
        parallelism = verdict.target
    elif state.in_flight is not None and state.in_flight.scaling:
        parallelism = state.in_flight.target
    elif model.backlog_records > settings.backlog_floor_records:
        parallelism = model.parallelism
    else:
        return 0.0
    units = effective_units(parallelism, model.source_partitions, model.task_slots)
    processed = min(model.capacity_at(units), demand(model, settings, inflow))
    return max(0.0, model.selectivity * (processed - model.recent_throughput))
