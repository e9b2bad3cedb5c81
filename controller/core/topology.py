"""Pipelines: jobs chained through topics, sized together in one round.

Owns the topology (discovered from the `source_topics` / `sink_topics` each query reports:
an edge runs from a query whose sink topic another query reads) and `plan`, which decides
every query in topological order. Pure; `loop` calls `plan` once per cycle with all ready
models, so one round sends one tuple per query that needs one.

Why: when a middle job is the bottleneck it passes on only what it can process, so nothing
in the next job's own metrics says what it will receive once the middle job is fixed. Each
query's projected output is handed to its readers as a `sizing.Inflow`, in two parts:

    A      = λ − inflow.passing + inflow.steady        (what it takes in for good)
    steady = selectivity × (min(capacity(units'), A) − recent throughput)
    burst  = selectivity × (B + A × pause + inflow.burst_records) records, sent on top of the
             steady output at selectivity × (capacity(units') − A) records/s

where units' is the upstream's new size (its `Scale` target, or the target in flight), the
recent throughput is what its readers see arriving now, and pause is
`reconfiguration_pause_s` (0 when it is not resized). The burst is the upstream's catch-up:
a resized query drains its backlog, what piled up while it restarted and whatever its own
upstreams' catch-up hands it, running full batches back to back, i.e. flat out. Sizing a
reader for that peak buys it capacity for a burst of seconds; ignoring it leaves the reader
backlogged and sized again a round later. `policy` sizes the reader for the steady rate plus
the part of the burst it cannot take as it comes, spread over its catch-up time (`sizing`),
as it does its own backlog. An upstream that cannot keep up even at units' sends its
capacity and no burst.

A reader's λ lags its upstream: the upstream writes at its commits, so right after a step
the reader has seen the new rate for a batch or two at most (in the simulator's pipeline, b
measured 147/s and c 109/s when a 400/s step had reached a 11 s before). The steady extra a
reader is sized for is therefore at least what its upstreams will send in all minus the part
of its λ read from their topics (`arriving_from`: by its partitions' shares of the arrivals);
producers outside the plan that write to those topics too keep that part + the upstreams'
extra, whichever is larger, and those on topics no upstream writes add to it.

Only an upstream that is being resized, is backlogged or passes on an inflow of its own
projects anything: otherwise its output is already in the downstream's λ, and projecting
from noisy rates would only add noise. A negative steady difference is not projected either:
a downstream is never sized down on a forecast. Queries in a cycle (a topology error) are
decided last, in name order, each with the inflow of those decided before it.

A reader's λ also leads its upstreams while they catch up: it holds their catch-up, written
a batch at a time (in the simulator's pipeline c measured 607/s, b's catch-up, 21 s after b's
resize for a 400/s step that b sends 400/s of for good). An upstream catching up (its backlog
shrinking faster than noise, or an actuation answered within `catch_up_s`: `catching_up`) has
a surplus, its output lately or over its window beyond what it sends for good
(`Output.steady`; for one that keeps up, what it takes in, even where its capacity reads
lower). The part of the reader's λ from their topics beyond what all its upstreams send for
good, up to their surplus, is `Inflow.passing`: taken off λ wherever the policy sizes or
judges it, as an upstream's own passing is off what it sends (b's λ holds a's catch-up as c's
holds b's). Without that evidence an output above λ is λ lagging a rise the upstream puts
through, real load; a model of an earlier cycle (`plan`'s `context`) has no surplus either.
Beyond the bound, λ on those topics is producers outside the plan, and a topic no upstream
writes is all theirs.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from controller.core.model import QueryModel
from controller.core.policy import decide
from controller.core.results import Hold, Scale, Verdict
from controller.core.sizing import NO_INFLOW, Inflow
from controller.core.state import ControlState
from controller.settings import PolicySettings


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
    queries on a cycle come last, in name order. O(queries × log queries + edges): a fleet
    is mostly queries that read no other's output."""
    waiting = {q: set(u) for q, u in ups.items()}
    readers: dict[str, list[str]] = {}
    for query, upstream in waiting.items():
        for writer in upstream:
            readers.setdefault(writer, []).append(query)
    order: list[str] = []
    placed: set[str] = set()
    ready = sorted(q for q, u in waiting.items() if not u)  # a sorted list is a heap
    while ready:
        query = heapq.heappop(ready)
        order.append(query)
        placed.add(query)
        for reader in readers.get(query, ()):
            pending = waiting[reader]
            pending.discard(query)
            if not pending and reader not in placed:
                heapq.heappush(ready, reader)
    return order + sorted(q for q in waiting if q not in placed)


FOLLOWED = Hold("decided by the instance that leads its shard")
"""What a query another controller instance decides stands for here (`plan`'s `followed`)."""


def plan(models: Mapping[str, QueryModel], states: Mapping[str, ControlState], now_ms: int,
         settings: PolicySettings, followed: Collection[str] = (),
         context: Collection[str] = ()) -> dict[str, Verdict]:
    """Every ready query's verdict, upstreams first, each downstream sized for what its
    upstreams will send once they are resized. The `followed` queries are decided by another
    instance (`core.shards`): this one knows neither their tuples in flight nor their
    cooldowns, so their output is projected from their backlog at their size now. The
    `context` ones (followed, and not modelled this cycle) get no verdict at all."""
    ups = upstreams(models)
    verdicts: dict[str, Verdict] = {}
    sends: dict[str, Output] = {}
    for query_id in topological_order(ups):
        model, state = models[query_id], states.get(query_id, ControlState())
        outputs = [sends[u] for u in ups[query_id] if u in sends]
        topics = {topic for u in ups[query_id] if u in sends for topic in models[u].sink_topics}
        inflow = received(model, outputs, topics)
        senders = [u for u in ups[query_id] if u in sends
                   and (sends[u].extra.any or (inflow.passing > 0 and sends[u].surplus > 0))]
        verdict: Verdict = FOLLOWED
        if query_id not in context:
            verdicts[query_id] = decide(model, state, now_ms, settings, inflow,
                                        " and ".join(senders))
        if query_id not in followed:
            verdict = verdicts[query_id]
        output = projected_output(model, state, verdict, inflow, settings) or steady_output(
            model, inflow)
        if query_id not in context:  # a model of an earlier cycle: its output then is past
            output = replace(output, surplus=surplus(model, state, now_ms, settings,
                                                     output.steady))
        sends[query_id] = output
    return verdicts


@dataclass(frozen=True, slots=True)
class Output:
    """A query's projected output once resized: its steady rate and what its readers get
    beyond what reaches them now (nothing when it projects nothing: `steady_output`)."""

    steady: float
    extra: Inflow
    surplus: float = 0.0
    """Records/s it sent beyond `steady` lately while catching up, which its readers' λ holds
    (`surplus`, `received`)."""


def received(model: QueryModel, outputs: Sequence[Output],
             topics: Collection[str] = ()) -> Inflow:
    """The inflow of a reader of `outputs` (written to `topics`): the extras of those that
    project one together, with the steady part at least what they will send minus the part of
    the reader's λ that comes from them (which lags them); and the part of that beyond what
    all of them send for good, up to their surplus, passing (module docstring)."""
    inflow = NO_INFLOW
    for output in outputs:
        inflow = inflow.plus(output.extra)
    projecting = [output for output in outputs if output.extra.any]
    sent = sum(output.steady for output in projecting)
    arriving = arriving_from(model, topics)
    # Not told apart from external records, none of λ is taken for a catch-up passing (it
    # would hide them), and all of it for what the upstreams send (the smaller extra)
    passing = (0.0 if arriving is None else
               min(arriving - sum(output.steady for output in outputs),
                   sum(output.surplus for output in outputs)))
    steady = sent - (model.arrival_rate if arriving is None else arriving)
    return replace(inflow, steady=max(inflow.steady, steady), passing=max(0.0, passing))


def arriving_from(model: QueryModel, topics: Collection[str]) -> float | None:
    """The part of λ that arrives on `topics`, by its partitions' shares of the window's
    arrivals: all of it when the query reads no other topic (or `topics` are not given); None
    when it reads others too and nothing arrived to tell them apart. A reader of an
    upstream's output and of an external topic too takes none of the external records for the
    upstream's. The shares are the batches' over `arrival_window_s`, λ the current level:
    right after a step on one topic the split lags it."""
    if not topics or set(model.source_topics) <= set(topics):
        return model.arrival_rate
    shares = model.partition_arrival_shares
    if not shares:
        return None
    return model.arrival_rate * shares.of_topics(topics)


def steady_output(model: QueryModel, inflow: Inflow) -> Output:
    """What a query that projects nothing (no backlog, no inflow: it keeps up) sends for good:
    what it takes in, even where its capacity reads lower (a hot partition's skew, records
    shed). Its readers' λ holds it already."""
    return Output(model.selectivity * (model.arrival_rate - inflow.passing), NO_INFLOW)


def surplus(model: QueryModel, state: ControlState, now_ms: int, settings: PolicySettings,
            sends: float) -> float:
    """Records/s the query sent beyond `sends` (what it sends for good), lately or over its
    window (a reader's λ, timed by its own batches, holds an upstream batch a while after it
    was written), while `catching_up`; otherwise none: an output above what it takes in is
    then its λ lagging a rise it puts through already, real load for its readers."""
    if not catching_up(model, state, now_ms, settings):
        return 0.0
    sent = model.selectivity * max(model.throughput, model.recent_throughput)
    return max(0.0, sent - sends)


def catching_up(model: QueryModel, state: ControlState, now_ms: int,
                settings: PolicySettings) -> bool:
    """Evidence that the query drains a backlog: it shrinks faster than noise, or an actuation
    of the controller's ended within `catch_up_s` (a restarted query drains what piled up while
    it paused, flat out, within that time; a restart the controller did not make shows as the
    shrinking)."""
    shrinking = model.backlog_trend_records_per_s < -settings.backlog_growth_records_per_s
    return shrinking or (state.settled_at_ms > 0
                         and now_ms - state.settled_at_ms <= settings.catch_up_s * 1000)


def projected_output(model: QueryModel, state: ControlState, verdict: Verdict,
                     inflow: Inflow, settings: PolicySettings) -> Output | None:
    """What this query will send once resized; None when it is not being resized, has no
    backlog and passes on no inflow (what it sends is already in its readers' λ)."""
    pause_s = settings.reconfiguration_pause_s
    if isinstance(verdict, Scale) and verdict.parameter == model.knob:
        parallelism = verdict.target
    elif state.in_flight is not None and state.in_flight.parameter == model.knob:
        parallelism = state.in_flight.target
    elif model.backlog_records > settings.backlog_floor_records or inflow.any:
        parallelism, pause_s = model.parallelism, 0.0
    else:
        return None
    top = model.capacity_at(model.units_at(parallelism))
    arriving = model.arrival_rate - inflow.passing + inflow.steady
    sends = model.selectivity * min(top, arriving)
    steady = max(0.0, sends - model.selectivity * model.recent_throughput)
    if top <= arriving:  # it never catches up: it sends its capacity, and no burst
        return Output(sends, Inflow(steady))
    behind = max(0.0, model.backlog_records) + arriving * pause_s + inflow.burst_records
    return Output(sends, Inflow(steady, model.selectivity * behind,
                                model.selectivity * (top - arriving)))
