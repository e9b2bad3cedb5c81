"""A job with its elastic runtime: the programmatic entry point, and the wiring.

Owns construction in an order where nothing waits for what is built after it (the checkpoint
claimed, the SparkSession, the desired state in force, the input the checkpoint resumes, the
query, its one owner, the control consumer), the threads (control, role, beat, warm-up, the
run loop of `run`), what the job publishes (metrics, heartbeats, beats, the desired state,
acks) and the shutdown. Every change to the query goes through its owner
(`owner.QueryOwner`), never from here. Neighbours: `cli` calls it; `publish` ships what
the query measures.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from prometheus_client import CollectorRegistry
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from schemas import knobs
from schemas.records import ControlTuple, Role
from streamctl.security.metrics_http import EndpointSecurityError, MetricsServer, PortInUse
from streaming_jobs.api import Job
from streaming_jobs.config import DEFAULT_METRICS_PORT, ConfigError, JobConfig, bind, changed
from streaming_jobs.loading import worker_path
from streaming_jobs.runtime.checkpoint import instances
from streaming_jobs.runtime.checkpoint.identity import claim_checkpoint
from streaming_jobs.runtime.checkpoint.input_source import InputSources
from streaming_jobs.runtime.checkpoint.input_switch import SwitchRefused
from streaming_jobs.runtime.checkpoint.leftovers import InstanceLock
from streaming_jobs.runtime.checkpoint.retention import Deleted
from streaming_jobs.runtime.checkpoint.running import running_batch
from streaming_jobs.runtime.checkpoint.state_repartition import (
    ROCKSDB_PROVIDER,
    StateRepartitionError,
    read_state_store_provider,
)
from streaming_jobs.runtime.control.reconfigure import QUIESCE_TIMEOUT_S
from streaming_jobs.runtime.control.shared_state import SharedDesiredState
from streaming_jobs.runtime.control.tuples import TupleListener
from streaming_jobs.runtime.desired.state import DesiredState, Limits
from streaming_jobs.runtime.kafka import (
    KafkaLogRanges,
    RecordPublisher,
    TypedConsumer,
    written_topic_problems,
)
from streaming_jobs.runtime.observe.prometheus import JobPrometheus
from streaming_jobs.runtime.owner import QueryOwner
from streaming_jobs.runtime.publish import Publisher
from streaming_jobs.runtime.query.lifecycle import ElasticQuery
from streaming_jobs.runtime.query.plan import Plan
from streaming_jobs.runtime.query.session import build_session, executors_for
from streaming_jobs.runtime.roles.hot import HotStandbyRun
from streaming_jobs.runtime.roles.standby import Instance, initial_role
from streaming_jobs.runtime.roles.supervise import Step

log = logging.getLogger(__name__)

RETIRED_CHECK_S = 30.0
"""How often the job looks for records appended to an input topic it switched away from."""
KAFKA_RETRY_S = 10.0
"""Pause before restarting a query that stopped because Kafka was away."""


class ElasticJob:
    """`start()`, then `run(stop_event)` or your own wait, then `stop()`."""

    def __init__(self, job: Job, config: JobConfig, spark: SparkSession | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        if not config.security.control_key:  # fail closed: see Security.control_key
            raise ConfigError("no control key: the job refuses to start without one, since "
                              "it could not tell the controller's control tuples from others'")
        self.config = config = bind(config, job)
        self.plan = Plan(job)
        # Refuses another query's checkpoint, before Spark.
        claim_checkpoint(config.storage.checkpoint_dir, config.identity.query_id, job)
        # A hot instance's own checkpoint is its own while it lives (`leftovers`).
        self._instance_lock = InstanceLock(config.storage.checkpoint_dir)
        if config.identity.standby == "hot":
            self._instance_lock.acquire()
        self._check_written_topics()
        self.prometheus = JobPrometheus(registry if registry is not None else CollectorRegistry())
        self._endpoint = self._serve_metrics()
        config = self.config
        ident = config.identity
        self._owns_spark = spark is None
        started = time.monotonic()
        self.spark = spark if spark is not None else build_session(config, worker_path(job))
        if self._owns_spark:
            log.info("SparkSession %s up in %.1f s", config.spark.master,
                     time.monotonic() - started)
        self._publisher = Publisher(config.topics, ident.query_id, RecordPublisher(
            config.bootstrap_servers, f"streamctl-job-{ident.instance_id}",
            config.security.kafka_security), self.prometheus,
            desired_state_path=config.storage.desired_state_path)
        self._executors = executors_for(self.spark, config.spark.executor_cores)
        self._offsets = KafkaLogRanges(config.bootstrap_servers, config.security.kafka_security)
        self.inputs = InputSources(config.storage.checkpoint_dir, config.storage.input_source_path,
                                   config.identity.query_id, self._offsets)
        self._shared = SharedDesiredState(ident, config.storage.desired_state_path,
                                          config.initial_state(), self.limits,
                                          self._publisher.desired_state)
        desired = self._resume_input(self._shared.initial())
        self.query = ElasticQuery(self.spark, self.plan, config, self.inputs,
                                  self._publisher.progress, self._publisher.heartbeat,
                                  desired=desired, executors=self._executors,
                                  ownership=self._shared.superseded,
                                  on_input_deleted=self._count_deleted)
        self.hot = (HotStandbyRun(self.spark, self.plan, config.run, self._offsets,
                                  self._active_checkpoint, self._shared.current,
                                  checkpoint_dir=config.storage.checkpoint_dir,
                                  trigger_interval_s=config.timing.trigger_interval_s)
                    if config.identity.standby == "hot" else None)
        instance = Instance(config.identity, self.query, initial_role(config.identity, desired),
                            hot=self.hot)
        self.owner = QueryOwner(
            self.query, instance,
            self._shared, self.limits, kafka_retry_s=KAFKA_RETRY_S,
            on_recorded=lambda state: self.prometheus.shed_fraction.labels(
                config.identity.query_id).set(state.shed_fraction))
        self.prometheus.watch_sink(config.identity.query_id, self.query.sink.skipped_replays)
        # Every instance sees every tuple and filters on query_id.
        self.prometheus.control_ready.labels(config.identity.query_id).set(0)
        self._consumer = TypedConsumer(
            config.bootstrap_servers, config.topics.control_topic,
            f"streamctl-job-{config.identity.query_id}-{config.identity.instance_id}", ControlTuple,
            config.security.kafka_security,
            on_assignment=lambda held: self.prometheus.control_ready.labels(
                config.identity.query_id).set(int(held)))
        self.prometheus.watch_control_consumer(config.identity.query_id,
                                               lambda: self._consumer.fetch_restarts)
        self._stopping = threading.Event()
        self._reported_unread: dict[str, int] = {}
        loop = TupleListener(self._consumer, self.owner, self._publisher.ack,
                             self.prometheus.control_counter(ident.query_id),
                             query_id=ident.query_id, instance_id=ident.instance_id,
                             key=config.security.control_key)
        self._threads = (
            threading.Thread(target=loop.run, args=(self._stopping,), name="streamctl-control",
                             daemon=True),
            threading.Thread(target=self._watch_role, name="streamctl-role", daemon=True),
            *([threading.Thread(target=self._send_beats, name="streamctl-beat", daemon=True)]
              if config.timing.beat_interval_s > 0 else []))

    def _serve_metrics(self) -> MetricsServer | None:
        """The Prometheus endpoint, up before Spark starts: the default port gives way to a
        free one when another process holds it (a second job on this host), any other port
        must be free. `config.endpoint.metrics_port` becomes the port taken."""
        c, wanted, security = self.config, self.config.endpoint, self.config.security
        try:
            endpoint = self.prometheus.serve(wanted.metrics_host, wanted.metrics_port,
                                             security.endpoint_security,
                                             any_port_if_taken=wanted.metrics_port
                                             == DEFAULT_METRICS_PORT)
        except PortInUse as exc:
            raise ConfigError(f"job {c.identity.query_id}: its metrics endpoint cannot listen: "
                              f"{exc} (--metrics-port, STREAMCTL_METRICS_PORT): choose a free "
                              "port, or 0 for no endpoint") from None
        except EndpointSecurityError as exc:
            raise ConfigError(f"metrics endpoint: {exc}") from None
        if endpoint is None:
            return None
        if endpoint.server_port != wanted.metrics_port:
            log.warning("metrics port %d is in use on %s (another job on this host?): serving "
                        "the metrics on port %d instead", wanted.metrics_port,
                        wanted.metrics_host, endpoint.server_port)
        self.config = changed(c, metrics_port=endpoint.server_port)
        log.info("Prometheus metrics at %s://%s/metrics",
                 "https" if security.endpoint_security.tls_cert_file else "http",
                 self.config.endpoint.address)
        return endpoint

    def _check_written_topics(self) -> None:
        """The output and dead-letter topics exist and take the job's largest record, before
        Spark starts (else the first oversized row or dead letter would fail a batch)."""
        c = self.config
        problems = written_topic_problems(
            c.bootstrap_servers, c.security.kafka_security, c.bounds.max_record_bytes,
            [("output topic", c.topics.output_topic), ("dead-letter topic", c.topics.dlq_topic)])
        if problems:
            raise ConfigError(f"job {c.identity.query_id}: " + "; ".join(problems))

    @property
    def role(self) -> Role:
        return self.owner.role

    def limits(self) -> Limits:
        """What bounds a control tuple's value here: the options, the job's declaration, the
        checkpoint (its state store, its input source)."""
        input_reason = self.inputs.unsupported()
        return replace(self.config.limits(), udf_versions=self.plan.udf_versions,
                       master=str(self.spark.sparkContext.master),
                       unsupported=self.plan.unsupported() + self._state_store_unsupported()
                       + (((knobs.INPUT_TOPIC, input_reason),) if input_reason else ()))

    def _state_store_unsupported(self) -> tuple[tuple[str, str], ...]:
        """Why state partitions cannot change here: a checkpoint whose state store Spark
        cannot repartition (fixed at the query's first batch). A stateless job is the
        plan's to say (`Plan.unsupported`)."""
        if not self.plan.stateful:
            return ()
        try:
            provider = read_state_store_provider(self.config.storage.checkpoint_dir)
        except StateRepartitionError:
            return ()  # no batch yet: the session's store applies
        if provider and provider != ROCKSDB_PROVIDER:
            return ((knobs.STATE_PARTITIONS, f"its checkpoint uses {provider.rsplit('.', 1)[-1]}; "
                                         "Spark repartitions only the RocksDB state store"),)
        return ()

    def _resume_input(self, desired: DesiredState) -> DesiredState:
        """The input the checkpoint resumes (a switch completes even across a crash)."""
        c = self.config
        try:
            note = self.inputs.resume(desired.input_topic)
        except SwitchRefused as exc:
            raise ConfigError(f"input of query {c.identity.query_id}: {exc}") from exc
        if note is not None:
            log.warning("query %s: %s", c.identity.query_id, note)
        return replace(desired, input_topic=self.inputs.current.topic)

    # -- lifecycle --
    def start(self) -> None:
        self._publisher.check_state_topic(
            self._consumer.topic_exists(self.config.topics.state_topic))
        self.owner.start()
        for thread in self._threads:
            thread.start()
        d, c, ident = self.query.desired, self.config, self.config.identity
        if self.owner.role is Role.STANDBY:
            if self.hot is None:
                threading.Thread(target=self._warm_up, name="streamctl-warm-up",
                                 daemon=True).start()
            log.info("job %s (instance %s) is a %s standby: SparkSession on %s up, %s, "
                     "heartbeat every %g s; it starts the query from %s when promoted",
                     ident.query_id, ident.instance_id, c.identity.standby, c.spark.master,
                     "the query trailing the active's commits into nothing"
                     if self.hot is not None else "no query",
                     c.timing.heartbeat_interval_s, c.storage.checkpoint_dir)
            return
        if self.query.halted() is not None:
            log.error("job %s (instance %s) is up and halted, running no query: its input was "
                      "deleted before it was read (above); restart it with --on-data-loss skip "
                      "to go on", ident.query_id, ident.instance_id)
            return
        log.info("job %s (instance %s) started at epoch %d on %s, %d task slots: %s",
                 ident.query_id, ident.instance_id, d.epoch, c.spark.master,
                 self.query.task_slots(), d.describe(knob=self.plan.scaling_parameter))

    def wait_control_ready(self, timeout_s: float) -> bool:
        """Whether the control consumer holds its partitions (tuples sent now are seen)."""
        return self._consumer.assigned.wait(timeout_s)

    def run(self, stop: threading.Event, max_runtime_s: float = 0.0) -> int:
        """Block until `stop` is set or the runtime is up (0), or the query failed for good (1).
        A query that stopped by itself is stepped down or restarted (`supervise`)."""
        deadline = time.monotonic() + max_runtime_s if max_runtime_s else None
        next_retired_check = time.monotonic() + RETIRED_CHECK_S
        while not stop.wait(1.0):
            if deadline is not None and time.monotonic() >= deadline:
                log.info("max runtime %.0f s reached", max_runtime_s)
                return 0
            if time.monotonic() >= next_retired_check and self.owner.role is Role.ACTIVE:
                self.check_retired_inputs()
                next_retired_check = time.monotonic() + RETIRED_CHECK_S
            self._release_surplus_executors()
            step = self.owner.next_step()
            if step is not None and step.step is Step.EXIT:
                log.error("query %s is not running: %s", self.config.identity.query_id, step.reason)
                return 1
            if step is not None and not stop.wait(step.delay_s):
                self.owner.take(step)
        return 0

    def _release_surplus_executors(self) -> None:
        try:
            self.owner.release_surplus_executors()
        except Py4JError as exc:  # the next round tries again
            log.warning("could not release surplus executors: %s", exc)

    def check_retired_inputs(self) -> dict[str, int]:
        """Records appended to topics the job switched away from: never read unless the job
        switches back, so they are logged and exported, not left silent."""
        unread = self.inputs.unread_retired()
        for topic in self.inputs.current.retired:
            self.prometheus.unread_retired.labels(self.config.identity.query_id, topic).set(
                unread.get(topic, 0))
        for topic, count in unread.items():
            if self._reported_unread.get(topic) == count:
                continue
            self._reported_unread[topic] = count
            log.error("%d records were appended to %s after the job switched its input away "
                      "from it: they are not read (their producers did not move); switching "
                      "the input back to %s reads them", count, topic, topic)
        return unread

    def _active_checkpoint(self) -> str | None:
        """With a hot standby: the checkpoint the active instance writes."""
        storage, me = self.config.storage, self.config.identity.instance_id
        named = self._shared.current().active_instance
        if named == me:  # its promotion failed: its checkpoint may hold the output's end
            return None
        return instances.active_checkpoint(storage.query_dir, storage.checkpoint_dir, named)

    def _warm_up(self) -> None:
        try:
            log.info("standby warm-up: %s", self.query.warm_up())
        except Exception:  # a colder promotion, not a broken standby
            log.exception("standby warm-up failed; a promotion starts cold")

    def _count_deleted(self, found: list[Deleted]) -> None:
        for lost in found:
            self.prometheus.input_lost.labels(self.config.identity.query_id,
                                              lost.topic).inc(lost.records)

    def _watch_role(self) -> None:
        """The role thread: `standby.Instance.watch`, through the owner, every heartbeat
        interval; a halted active's heartbeat, which no query sends for it."""
        while not self._stopping.wait(self.config.timing.heartbeat_interval_s):
            try:
                beat = self.owner.watch()
                if beat is not None:
                    self._publisher.metrics(beat)
                halted = self.query.halted()
                self.prometheus.halted.labels(self.config.identity.query_id).set(
                    int(halted is not None))
                if halted is not None and self.owner.role is Role.ACTIVE:
                    query = self.query
                    self._publisher.halted(query.context(query.desired), int(time.time() * 1000),
                                           query.resume_offsets())
            except Exception:  # e.g. an unreadable shared file: say so, keep watching
                log.exception("role check of %s failed", self.config.identity.instance_id)

    def _send_beats(self) -> None:
        """The beat thread: while this instance is active, a liveness beat every
        `beat_interval_s` with the batch its query runs. It takes no lock, so a long batch
        or a reconfiguration in progress does not hold it back: only a process that is gone
        or frozen stops beating."""
        interval_s = self.config.timing.beat_interval_s
        last = time.monotonic()
        while not self._stopping.wait(interval_s):
            now = time.monotonic()
            if now - last > 2 * interval_s:  # the controller takes 2.5 intervals as a loss
                log.warning("liveness beat %.1f s late: this process was starved (CPU, GIL, "
                            "swap); a controller may take it for lost", now - last - interval_s)
            last = now
            if self.owner.role is not Role.ACTIVE:
                continue
            try:
                query = self.query
                self._publisher.beat(query.context(query.desired), int(time.time() * 1000),
                                     running_batch(self.config.storage.checkpoint_dir))
            except Exception:  # e.g. Spark's JVM gone at shutdown: say so, keep beating
                log.exception("liveness beat of %s failed", self.config.identity.instance_id)

    def stop(self, on_purpose: bool = True) -> None:
        """Quiesce and stop the query, say so when `on_purpose` (its last metrics record: the
        controller then takes the silence for a stop, not a loss), then flush and close the
        Kafka clients."""
        self._stopping.set()
        for thread in self._threads:
            if thread.ident is not None:  # a job never started has no threads
                thread.join(timeout=QUIESCE_TIMEOUT_S + 60)
        try:
            if self.hot is not None:
                self.hot.stop()
            self.owner.stop()
            self.query.close()
            if on_purpose:
                self._publisher.stopped(self.query.context(self.owner.desired),
                                        int(time.time() * 1000), self.owner.role)
            if self._owns_spark:
                self.spark.stop()
        except (Py4JError, ConnectionError) as exc:
            # A signal sent to the whole process group (systemd, `timeout`) also ends Spark's
            # JVM; the checkpoint still ends at the last committed batch, so nothing is lost.
            log.warning("Spark's JVM exited before the query could be stopped in order (%s); "
                        "the next start resumes from the last committed batch",
                        type(exc).__name__)
        self._consumer.close()
        self._offsets.close()
        self._instance_lock.release()
        self._publisher.close()
        if self._endpoint is not None:
            self._endpoint.shutdown()
        log.info("job %s stopped", self.config.identity.query_id)
