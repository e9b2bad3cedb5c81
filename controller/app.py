"""Wiring: the control loop with Kafka adapters and Prometheus, and its clean shutdown.

Owns construction order (the ack consumer is assigned before anything can be sent) and
teardown (consumers closed, producer flushed). `cli` calls `run`; a program can call `run` or
use `kafka_controller` to drive cycles itself.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType

from controller.core.recovery import history_span_s, recover
from controller.explain.prom import ControllerMetrics, new_registry, serve
from controller.kafka.clients import (
    NO_KEY,
    KafkaAckSource,
    KafkaControlSink,
    KafkaDecisionLog,
    KafkaEndOffsets,
    KafkaMetricsSource,
    KafkaSetupError,
    KafkaWriter,
)
from controller.kafka.history import read_history
from controller.loop.cycle import ControlLoop, Ports
from controller.loop.ports import OnDecodeError, SystemClock
from controller.settings import ControllerSettings
from schemas import DecodeError

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
def kafka_controller(settings: ControllerSettings,
                     metrics: ControllerMetrics) -> Iterator[ControlLoop]:
    """A loop on Kafka; every client is closed on the way out, whatever happened."""
    kafka = settings.kafka
    on_error = DecodeErrorReporter(metrics)
    if not kafka.control_key and not settings.dry_run:  # fail before opening any client
        raise KafkaSetupError(NO_KEY)
    with ExitStack() as stack:
        writer = KafkaWriter(kafka)
        stack.callback(writer.close)
        acks = KafkaAckSource(kafka, on_error)
        stack.callback(acks.close)
        source = KafkaMetricsSource(kafka, on_error)
        stack.callback(source.close)
        ports = Ports(metrics=source, control=KafkaControlSink(writer, kafka.control_topic,
                                                                kafka.control_key),
                      acks=acks, decisions=KafkaDecisionLog(writer, kafka.decisions_topic),
                      clock=SystemClock(), observer=metrics,
                      offsets=KafkaEndOffsets(kafka) if settings.probe_interval_s > 0 else None)
        loop = ControlLoop(settings, ports)
        resume_from_history(loop, settings, ports.clock.now_ms(), on_error)
        yield loop


def resume_from_history(loop: ControlLoop, settings: ControllerSettings, now_ms: int,
                        on_error: OnDecodeError) -> None:
    """Seed the loop with what a previous run of this controller did (epochs, the tuple in
    flight, the cooldown), read from its topics, so a restart repeats and contradicts nothing."""
    span_ms = int(history_span_s(ack_timeout_s=settings.ack_timeout_s,
                                 cooldown_s=settings.policy.cooldown_s) * 1000)
    history = read_history(settings.kafka, now_ms - span_ms, on_error)
    recovered = recover(history, now_ms, issuer=settings.issuer,
                        cooldown_s=settings.policy.cooldown_s,
                        ack_timeout_s=settings.ack_timeout_s)
    loop.states.update(recovered.states)
    for line in recovered.summary:
        log.info("resuming %s", line)


def run(settings: ControllerSettings, *, max_cycles: int | None = None,
        timeout_s: float | None = None, metrics: ControllerMetrics | None = None,
        handle_signals: bool = True) -> int:
    """Run the controller until SIGTERM / Ctrl-C (or the bounds); returns the cycles run.

    `metrics` defaults to a fresh registry, served on `settings.metrics_port` unless it is 0.
    """
    metrics = ControllerMetrics(new_registry()) if metrics is None else metrics
    log.info("controller starting: metrics from %s at %s%s", settings.kafka.metrics_topic,
             settings.kafka.bootstrap_servers, " (dry run)" if settings.dry_run else "")
    stop = _StopRequest()
    with ExitStack() as stack:
        if handle_signals:
            # Before anything slow: a SIGTERM during start-up must still close what was opened.
            stack.enter_context(_signals_to(stop))
        if settings.metrics_port:
            stack.callback(serve(settings.metrics_port, metrics.registry,
                                 settings.metrics_endpoint).shutdown)
        loop = stack.enter_context(kafka_controller(settings, metrics))
        stop.attach(loop)
        cycles = loop.run(max_cycles=max_cycles, timeout_s=timeout_s)
    log.info("controller stopped after %d cycles", cycles)
    return cycles


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
