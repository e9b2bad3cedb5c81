"""Wiring: the control loop with Kafka adapters and Prometheus, and its clean shutdown.

Owns construction order (the ack consumer is assigned before anything can be sent) and
teardown (consumers closed, producer flushed). `cli` calls `run`; a program can call `run` or
use `kafka_controller` to drive cycles itself.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from types import FrameType

from controller.cluster_status import MasterStatus
from controller.errors import UserError
from controller.explain.page import Timeline
from controller.explain.prom import ControllerMetrics, MetricsServer, new_registry, serve
from controller.kafka.clients import (
    NO_KEY,
    KafkaAckSource,
    KafkaControlSink,
    KafkaDecisionLog,
    KafkaEndOffsets,
    KafkaMetricsSource,
    KafkaSetupError,
)
from controller.kafka.lease import KafkaLeadership
from controller.loop.cycle import ControlLoop, Ports
from controller.loop.ports import Observers, SystemClock
from controller.settings import DEFAULT_METRICS_PORT, ControllerSettings
from schemas import DecodeError
from streamctl.security.metrics_http import PortInUse

log = logging.getLogger("controller")


class DecodeErrorReporter:
    """Counts every bad record; logs the first few in full, then one in a thousand, so a topic
    full of garbage is visible without drowning the status output."""

    _LOG_FIRST = 10
    _LOG_EVERY = 1000

    def __init__(self, metrics: ControllerMetrics) -> None:
        self._metrics = metrics
        self.count = 0

    def __call__(self, error: DecodeError) -> None:
        self.count += 1
        self._metrics.decode_error(error)
        if self.count <= self._LOG_FIRST or self.count % self._LOG_EVERY == 0:
            log.warning("skipping undecodable record (%d so far): %s", self.count, error)


@contextmanager
def kafka_controller(settings: ControllerSettings, metrics: ControllerMetrics,
                     timeline: Timeline | None = None) -> Iterator[ControlLoop]:
    """A loop on Kafka, one of any number of instances (it writes only while it leads); every
    client is closed on the way out, whatever happened."""
    kafka = settings.kafka
    on_error = DecodeErrorReporter(metrics)
    if not kafka.control_key and not settings.dry_run:  # fail before opening any client
        raise KafkaSetupError(NO_KEY)
    with ExitStack() as stack:
        acks = KafkaAckSource(kafka, on_error, on_fetch_restart=metrics.fetch_restarted)
        stack.callback(acks.close)
        source = KafkaMetricsSource(kafka, on_error, settings.model.window_s,
                                    on_fetch_restart=metrics.fetch_restarted)
        stack.callback(source.close)
        leadership = KafkaLeadership(settings, on_error)
        stack.callback(leadership.close)
        writers = leadership.writers
        cluster = None
        if settings.spark_master_status_url:
            cluster = MasterStatus(settings.spark_master_status_url,
                                   settings.cluster_status_interval_s,
                                   settings.cluster_collect_s).start()
            stack.callback(cluster.close)
        ports = Ports(metrics=source, control=KafkaControlSink(writers, kafka.control_topic,
                                                                kafka.control_key,
                                                                kafka.decisions_topic),
                      acks=acks, decisions=KafkaDecisionLog(writers, kafka.decisions_topic),
                      clock=SystemClock(),
                      observer=metrics if timeline is None else Observers(metrics, timeline),
                      offsets=KafkaEndOffsets(kafka) if settings.probe_interval_s > 0 else None,
                      leadership=leadership, cluster=cluster)
        yield ControlLoop(settings, ports)


YOUNG_COLLECTION_AT = 100_000
"""Net new container objects between two of the garbage collector's young collections, in a
controller process (CPython 3.11's default: 700)."""


def collect_garbage_rarely() -> None:
    """Tune this process's garbage collector for the controller's heap. Its state is freed by
    reference counting as the windows slide: in `bench.fleet`'s cycles the cyclic collector
    found no garbage at all, yet at the default threshold it ran three times a cycle at 300
    queries, and its older collections walked the whole model state, about a fifth of the
    cycle's CPU there and a third at 1 000 queries. Called by `controller run` before it starts;
    a program that drives `run` itself may call it too."""
    gc.collect()
    gc.freeze()  # what start-up made (modules, settings) is never walked again
    gc.set_threshold(YOUNG_COLLECTION_AT, *gc.get_threshold()[1:])


def run(settings: ControllerSettings, *, max_cycles: int | None = None,
        timeout_s: float | None = None, metrics: ControllerMetrics | None = None,
        handle_signals: bool = True) -> int:
    """Run the controller until SIGTERM / Ctrl-C (or the bounds); returns the cycles run.

    `metrics` defaults to a fresh registry, served on `settings.metrics_port` unless it is 0.
    """
    metrics = ControllerMetrics(new_registry()) if metrics is None else metrics
    if not settings.instance_id:
        settings = replace(settings, instance_id=f"{socket.gethostname()}-{os.getpid()}")
    log.info("controller instance %s starting: metrics from %s at %s%s; leads the shards "
             "the group %s gives it", settings.instance_id, settings.kafka.metrics_topic,
             settings.kafka.bootstrap_servers, " (dry run)" if settings.dry_run else "",
             settings.kafka.group_id)
    stop = _StopRequest()
    with ExitStack() as stack:
        if handle_signals:
            # Before anything slow: a SIGTERM during start-up must still close what was opened.
            stack.enter_context(_signals_to(stop))
        timeline = Timeline() if settings.metrics_port else None
        if timeline is not None:
            stack.callback(_serve(settings, metrics, timeline).shutdown)
        loop = stack.enter_context(kafka_controller(settings, metrics, timeline))
        stop.attach(loop)
        cycles = loop.run(max_cycles=max_cycles, timeout_s=timeout_s)
    log.info("controller stopped after %d cycles", cycles)
    return cycles


def _serve(settings: ControllerSettings, metrics: ControllerMetrics,
           timeline: Timeline) -> MetricsServer:
    """The Prometheus endpoint and the live page: the default port gives way to a free one
    when another process holds it (a second instance on this host); any other port must be
    free."""
    port = settings.metrics_port
    try:
        endpoint = serve(port, metrics.registry, settings.metrics_endpoint,
                         host=settings.metrics_host,
                         any_port_if_taken=port == DEFAULT_METRICS_PORT, timeline=timeline)
    except PortInUse as exc:
        raise UserError(f"the controller's metrics endpoint cannot listen: {exc} "
                        "(--metrics-port, STREAMCTL_CONTROLLER_METRICS_PORT): choose a free "
                        "port, or 0 for no endpoint") from None
    if endpoint.server_port != port:
        log.warning("metrics port %d is in use on %s (another controller on this host?): "
                    "serving the metrics on port %d instead", port, settings.metrics_host,
                    endpoint.server_port)
    log.info("Prometheus metrics on %s:%d; the live page at %s://%s:%d/ui",
             settings.metrics_host, endpoint.server_port, settings.metrics_endpoint.scheme,
             settings.metrics_host, endpoint.server_port)
    return endpoint


class _StopRequest:
    """Remembers a stop asked for before the loop exists and passes it on once it does."""

    def __init__(self) -> None:
        self._loop: ControlLoop | None = None
        self._requested = False

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        log.info("%s received, stopping after this cycle", signal.Signals(signum).name)
        self._requested = True
        if self._loop is not None:
            self._loop.stop()

    def attach(self, loop: ControlLoop) -> None:
        self._loop = loop
        if self._requested:
            loop.stop()


@contextmanager
def _signals_to(handler: _StopRequest) -> Iterator[None]:
    """SIGTERM and Ctrl-C end the loop after its cycle, so clients close cleanly; the previous
    handlers come back afterwards (the caller may be a longer-lived process, or pytest)."""
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
