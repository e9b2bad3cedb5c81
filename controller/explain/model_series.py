"""The controller's per-query model series, read from each query's newest model when Prometheus
scrapes: a collector (`ModelSeries`), not gauges set every cycle.

Owns the names and meanings of the modelled series (arrival, capacity, backlog, … and the
stated objectives). Why: set on gauges, each query cost a dozen locked label look-ups a cycle,
about a twentieth of the cycle at a thousand queries, for values a scrape reads every 5–15 s.
Here the loop's thread only keeps each query's newest model (or outage); a scrape copies that
map — one C-level call, so atomic under the GIL, with no lock for the loop to take — and reads
the frozen models it holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.core.model import QueryModel
from controller.core.outage import Outage


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


@dataclass(frozen=True, slots=True)
class _Series:
    name: str
    doc: str
    of_model: Callable[[QueryModel], float]
    in_outage: Callable[[Outage], float] | None
    """What a query processing nothing shows (None: its last model's value stays)."""


def _nothing(outage: Outage) -> float:
    return 0.0


def _unknown(outage: Outage) -> float:
    """A gap, never the last batch's figure."""
    return math.nan


SERIES = (
    _Series("streamctl_arrival_rate_records_per_second",
            "Arrival rate λ: growth of the source partitions' end offsets (probed at the broker, "
            "else as the batches saw them).",
            lambda m: m.arrival_rate, lambda o: _or_nan(o.arrival_rate)),
    _Series("streamctl_processing_rate_records_per_second",
            "Capacity: records per second at 100% busy with current units.",
            lambda m: m.capacity, _unknown),
    _Series("streamctl_throughput_records_per_second",
            "Records per second actually processed over the window.",
            lambda m: m.throughput, _nothing),
    _Series("streamctl_backlog_records", "Estimated backlog B in records.",
            lambda m: m.backlog_records, lambda o: _or_nan(o.backlog_records)),
    # No capacity estimate means no ratio: NaN shows as a gap, +Inf would wreck the axis.
    _Series("streamctl_utilisation_ratio", "Arrival rate / capacity.",
            lambda m: m.utilisation if math.isfinite(m.utilisation) else math.nan, _unknown),
    _Series("streamctl_busy_ratio", "Fraction of wall time spent in batches.",
            lambda m: m.busy_ratio, _nothing),
    _Series("streamctl_current_parallelism",
            "Value in force of the knob the job scales by (input parallelism or state "
            "partitions).", lambda m: m.parallelism, None),
    _Series("streamctl_batch_overhead_seconds",
            "Fixed cost of every micro-batch, fitted from busy time over batch size (0 when it "
            "cannot be told apart yet).", lambda m: m.batch_overhead_s, _unknown),
    _Series("streamctl_true_processing_rate_per_unit_records_per_second",
            "μ: records per second of useful busy time per unit.",
            lambda m: m.rate_per_unit, _unknown),
    _Series("streamctl_delay_seconds",
            "How long a record arriving now waits before its batch commits: the backlog ahead "
            "of it at the query's capacity, plus a trigger interval (NaN: no capacity measured "
            "yet).", lambda m: _or_nan(m.delay_s), None),
)
DESIRED = ("streamctl_desired_parallelism",
           "Value of that knob the controller wants (or has asked for).")
OBJECTIVE = ("streamctl_objective_seconds",
             "An objective the query's job states (max_delay_s: most delay; drain_within_s: most "
             "time a backlog may take to drain); one series per stated objective.")
OBJECTIVE_MET = ("streamctl_objective_met",
                 "1 while the query meets the stated objective, 0 while it does not, NaN while "
                 "it cannot be told (no capacity measured).")


class ModelSeries(Collector):
    """Each query's newest model (and outage), exported at scrape time."""

    def __init__(self) -> None:
        self._newest: dict[str, tuple[QueryModel | None, Outage | None]] = {}
        self._desired: dict[str, int] = {}

    def modelled(self, model: QueryModel, desired: int | None) -> None:
        """`desired`: the knob's value the controller wants; None keeps the last one."""
        self._newest[model.query_id] = (model, None)
        if desired is not None:
            self._desired[model.query_id] = desired

    def outage(self, query_id: str, outage: Outage) -> None:
        """Nothing is processed: no capacity, no utilisation, no busy time; the backlog and
        arrival the broker holds, NaN (a gap) where unknown, never the last batch's figures."""
        model = self._newest.get(query_id, (None, None))[0]
        self._newest[query_id] = (model, outage)

    def forget(self, query_ids: Collection[str]) -> None:
        for query_id in query_ids:
            self._newest.pop(query_id, None)
            self._desired.pop(query_id, None)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return self._families({}, {})

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return self._families(self._newest.copy(), self._desired.copy())

    @staticmethod
    def _families(newest: dict[str, tuple[QueryModel | None, Outage | None]],
                  desired: dict[str, int]) -> Iterator[GaugeMetricFamily]:
        for series in SERIES:
            family = GaugeMetricFamily(series.name, series.doc, labels=["query"])
            for query_id, (model, outage) in newest.items():
                if outage is not None and series.in_outage is not None:
                    family.add_metric([query_id], series.in_outage(outage))
                elif model is not None:
                    family.add_metric([query_id], series.of_model(model))
            yield family
        family = GaugeMetricFamily(*DESIRED, labels=["query"])
        for query_id, value in desired.items():
            family.add_metric([query_id], value)
        yield family
        bound = GaugeMetricFamily(*OBJECTIVE, labels=["query", "objective"])
        met = GaugeMetricFamily(*OBJECTIVE_MET, labels=["query", "objective"])
        for query_id, (model, _) in newest.items():
            for standing in model.standings() if model is not None else ():
                bound.add_metric([query_id, standing.objective], standing.bound_s)
                met.add_metric([query_id, standing.objective],
                               math.nan if standing.met is None else float(standing.met))
        yield bound
        yield met
