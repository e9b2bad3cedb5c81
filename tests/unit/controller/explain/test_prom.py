"""Prometheus metrics on an injected registry: names, labels, values."""

from __future__ import annotations

import math
from dataclasses import replace

from controller.core.model import QueryModel
from controller.core.outage import Outage
from controller.explain.prom import ControllerMetrics, new_registry
from schemas import DecodeError
from schemas.objectives import Objectives

MODEL = QueryModel(
    query_id="q1", samples=10, config_epoch=0, arrival_rate=700, throughput=400,
    busy_ratio=0.98, rate_per_unit=200, parallelism=2, units=2, source_partitions=2,
    task_slots=16, backlog_records=6_000, backlog_trend_records_per_s=300,
    time_to_drain_s=math.inf, batch_overhead_s=1.5)


def test_figures_and_counters_are_exported() -> None:
    registry = new_registry()
    metrics = ControllerMetrics(registry)
    metrics.metrics_received(3)
    metrics.modelled(MODEL, 5)
    metrics.decided("q1", "hold", "within band", 1_700_000_000_000)
    metrics.decided("q1", "scale_up", "backlog 6 000 records growing", 1_700_000_005_500)
    metrics.acked("q1", "APPLIED", 4_200)
    metrics.acked("q1", "REJECTED", 0)
    metrics.ack_timed_out("q1")
    metrics.decode_error(DecodeError("bad", topic="streamctl.metrics", partition=0, offset=7))
    metrics.recommended("throttle")
    metrics.lost(["q1", "q2"])

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("streamctl_arrival_rate_records_per_second", query="q1") == 700
    # 2 units × 200/s with 1.5 s per batch but no batch cap: the overhead amortises away.
    assert value("streamctl_processing_rate_records_per_second", query="q1") == 400
    assert value("streamctl_throughput_records_per_second", query="q1") == 400
    assert value("streamctl_backlog_records", query="q1") == 6_000
    assert value("streamctl_utilisation_ratio", query="q1") == 1.75
    assert value("streamctl_busy_ratio", query="q1") == 0.98
    assert value("streamctl_current_parallelism", query="q1") == 2
    assert value("streamctl_desired_parallelism", query="q1") == 5
    assert value("streamctl_decisions_total", query="q1", action="scale_up") == 1
    assert value("streamctl_acks_total", query="q1", outcome="APPLIED") == 1
    # Only the last decision's series stays, with its reason for Grafana's annotation.
    assert value("streamctl_last_decision_timestamp_seconds", query="q1", action="scale_up",
                 reason="backlog 6 000 records growing") == 1_700_000_005.5
    assert value("streamctl_last_decision_timestamp_seconds", query="q1", action="hold",
                 reason="within band") is None
    # Pauses of applied tuples only: a rejection changed nothing.
    assert value("streamctl_reconfiguration_pause_seconds_count", query="q1") == 1
    assert value("streamctl_reconfiguration_pause_seconds_sum", query="q1") == 4.2
    assert value("streamctl_reconfiguration_pause_seconds_bucket", query="q1", le="5.0") == 1
    assert value("streamctl_reconfiguration_pause_seconds_bucket", query="q1", le="2.0") == 0
    assert value("streamctl_last_reconfiguration_pause_seconds", query="q1") == 4.2
    assert value("streamctl_ack_timeouts_total", query="q1") == 1
    assert value("streamctl_decode_errors_total", topic="streamctl.metrics") == 1
    assert value("streamctl_metrics_records_total") == 3
    assert value("streamctl_batch_overhead_seconds", query="q1") == 1.5
    assert value("streamctl_true_processing_rate_per_unit_records_per_second", query="q1") == 200
    assert value("streamctl_recommendations_total", action="throttle") == 1
    assert value("streamctl_lost_queries") == 2


def test_the_delay_and_each_stated_objective_are_exported_with_whether_it_is_met() -> None:
    registry = new_registry()
    metrics = ControllerMetrics(registry)
    stating = replace(MODEL, trigger_interval_s=2.0,
                      objectives=Objectives(max_delay_s=10, drain_within_s=120))
    metrics.modelled(stating, None)
    metrics.modelled(replace(MODEL, query_id="q2", trigger_interval_s=2.0), None)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("streamctl_delay_seconds", query="q1") == 17  # 6 000 / 400 + 2
    assert value("streamctl_objective_seconds", query="q1", objective="max_delay_s") == 10
    assert value("streamctl_objective_met", query="q1", objective="max_delay_s") == 0
    assert value("streamctl_objective_seconds", query="q1", objective="drain_within_s") == 120
    # 6 000 behind with 700/s arriving at 400/s: it never drains.
    assert value("streamctl_objective_met", query="q1", objective="drain_within_s") == 0
    assert value("streamctl_delay_seconds", query="q2") == 17
    assert value("streamctl_objective_met", query="q2", objective="max_delay_s") is None


def test_an_objective_the_job_no_longer_states_leaves_prometheus() -> None:
    registry = new_registry()
    metrics = ControllerMetrics(registry)
    stating = replace(MODEL, trigger_interval_s=2.0, objectives=Objectives(max_delay_s=10))
    metrics.modelled(stating, None)
    metrics.modelled(replace(stating, objectives=Objectives()), None)  # restarted without it
    for name in ("streamctl_objective_seconds", "streamctl_objective_met"):
        assert registry.get_sample_value(name, {"query": "q1",
                                                "objective": "max_delay_s"}) is None


def test_a_query_in_outage_shows_nothing_processed_and_keeps_its_size_until_modelled_again(
) -> None:
    registry = new_registry()
    metrics = ControllerMetrics(registry)
    stating = replace(MODEL, trigger_interval_s=2.0, objectives=Objectives(max_delay_s=10))
    metrics.modelled(stating, 5)
    metrics.outage("q1", Outage(backlog_records=9_000, arrival_rate=None))

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"query": "q1", **labels})

    assert value("streamctl_backlog_records") == 9_000
    assert math.isnan(value("streamctl_arrival_rate_records_per_second") or 0)  # unknown
    assert value("streamctl_throughput_records_per_second") == 0
    assert value("streamctl_busy_ratio") == 0
    for name in ("streamctl_processing_rate_records_per_second", "streamctl_utilisation_ratio",
                 "streamctl_batch_overhead_seconds",
                 "streamctl_true_processing_rate_per_unit_records_per_second"):
        assert math.isnan(value(name) or 0), name  # a gap, never the last batch's figure
    # What it was sized at, wanted and stated stays: an outage changes none of them.
    assert value("streamctl_current_parallelism") == 2
    assert value("streamctl_desired_parallelism") == 5
    assert value("streamctl_delay_seconds") == 17
    assert value("streamctl_objective_seconds", objective="max_delay_s") == 10
    metrics.modelled(replace(stating, throughput=300), None)
    assert value("streamctl_throughput_records_per_second") == 300
    assert value("streamctl_processing_rate_records_per_second") == 400
    assert value("streamctl_backlog_records") == 6_000


def test_a_query_first_seen_in_outage_has_no_size_delay_or_objectives_yet() -> None:
    registry = new_registry()
    metrics = ControllerMetrics(registry)
    metrics.outage("q1", Outage(backlog_records=None, arrival_rate=120.0))

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"query": "q1", **labels})

    assert value("streamctl_arrival_rate_records_per_second") == 120
    assert math.isnan(value("streamctl_backlog_records") or 0)
    for name in ("streamctl_current_parallelism", "streamctl_desired_parallelism",
                 "streamctl_delay_seconds"):
        assert value(name) is None, name
    assert value("streamctl_objective_seconds", objective="max_delay_s") is None
