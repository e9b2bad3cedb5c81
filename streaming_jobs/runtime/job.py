"""A job with its elastic runtime: the programmatic entry point.

Owns the wiring (SparkSession, query, metrics publisher, Prometheus, the control and role
threads), the recording of the desired state after each applied tuple, and the process-level
lifecycle: start in the role the shared desired state or the options give (resuming the
persisted desired state), run until stopped, acting on a query that stopped by itself
(`supervise`), and shut down cleanly (quiesce, stop the query, flush producers, close the
consumer). Neighbours: `cli` calls it; everything under `runtime` is assembled here; the
standby lifecycle is `standby`.
"""

from __future__ import annotations

import logging
import threading
import time

from prometheus_client import CollectorRegistry
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress

from schemas.records import Ack, ControlTuple, DesiredStateRecord, Role, TaskMetrics
from streaming_jobs.api import Job
from streaming_jobs.config import ConfigError, JobConfig, bind
from streaming_jobs.loading import worker_path
from streaming_jobs.runtime.control import ControlLoop
from streaming_jobs.runtime.desired import SharedDesiredState, StaleWrite
from streaming_jobs.runtime.identity import claim_checkpoint
from streaming_jobs.runtime.kafka import RecordPublisher, TopicOffsets, TypedConsumer
from streaming_jobs.runtime.lifecycle import ElasticQuery
from streaming_jobs.runtime.metrics import (
    RunContext,
    dead_letters,
    heartbeat,
    to_task_metrics,
    warn_if_late_data,
    warn_if_shed,
)
from streaming_jobs.runtime.parameters import DesiredState, Limits, is_request
from streaming_jobs.runtime.plan import Plan
from streaming_jobs.runtime.prometheus import JobPrometheus
from streaming_jobs.runtime.reconfigure import QUIESCE_TIMEOUT_S, Applied, Reconfigurer
from streaming_jobs.runtime.session import build_session, executors_for
from streaming_jobs.runtime.standby import Instance, initial_role
from streaming_jobs.runtime.state_repartition import (
    ROCKSDB_PROVIDER,
    StateRepartitionError,
    read_state_store_provider,
)
from streaming_jobs.runtime.supervise import Step, Supervisor

log = logging.getLogger(__name__)

RETIRED_CHECK_S = 30.0
"""How often the job looks for records appended to an input topic it switched away from."""
KAFKA_RETRY_S = 10.0
"""Pause before restarting a query that stopped because Kafka was away."""


class ElasticJob:
    """`start()`, then `run(stop_event)` or your own wait, then `stop()`."""

    def __init__(self, job: Job, config: JobConfig, spark: SparkSession | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        if not config.control_key:  # fail closed: see JobConfig.control_key
            raise ConfigError("no control key: the job refuses to start without one, since "
                              "it could not tell the controller's control tuples from others'")
        config = bind(config, job)
        self.config = config
        self.plan = Plan(job)
        claim_checkpoint(config, job)  # refuses another query's checkpoint, before Spark
        self._owns_spark = spark is None
        started = time.monotonic()
        self.spark = (spark if spark is not None
                      else build_session(config, worker_path(job)))
        if self._owns_spark:
            log.info("SparkSession %s up in %.1f s", config.master, time.monotonic() - started)
        self.prometheus = JobPrometheus(registry if registry is not None else CollectorRegistry())
        self._publisher = RecordPublisher(config.bootstrap_servers,
                                          f"streamctl-job-{config.instance_id}",
                                          config.kafka_security)
        self._lock = threading.Lock()  # one reconfiguration, step-down or shutdown at a time
        self._last_metrics: TaskMetrics | None = None  # what an idle heartbeat repeats
        self._executors = executors_for(self.spark, config)
        self._offsets = TopicOffsets(config.bootstrap_servers, config.kafka_security)
        self._state_topic_exists = False
        self._shared = SharedDesiredState(config, self.limits, self._publish_state)
        initial = self._shared.initial()
        self.query = ElasticQuery(self.spark, self.plan, config, self._publish_progress,
                                  self._publish_heartbeat, desired=initial,
                                  executors=self._executors, offsets=self._offsets,
                                  ownership=self._superseded)
        self._instance = Instance(config, self.query, initial_role(config, initial))
        self._reconfigurer = Reconfigurer(self.query)
        self._supervisor = Supervisor(self.query, self._instance, self._superseded,
                                      kafka_retry_s=KAFKA_RETRY_S)
        # A group per instance: every instance sees every tuple and filters on query_id.
        self._consumer = TypedConsumer(
            config.bootstrap_servers, config.control_topic,
            f"streamctl-job-{config.query_id}-{config.instance_id}", ControlTuple,
            config.kafka_security)
        self._stopping = threading.Event()
        self._reported_unread: dict[str, int] = {}
        loop = ControlLoop(self._consumer, self, self._send_ack, self._count_control,
                           query_id=config.query_id, instance_id=config.instance_id,
                           key=config.control_key)
        self._threads = (
            threading.Thread(target=loop.run, args=(self._stopping,), name="streamctl-control",
                             daemon=True),
            threading.Thread(target=self._watch_role, name="streamctl-role", daemon=True))

    @property
    def role(self) -> Role:
        return self._instance.role

    # -- Reconfigurable (called from the control thread) --
    @property
    def desired(self) -> DesiredState:
        """The state in force; for a standby, the shared file's (the active's) as of now."""
        if self._instance.role is Role.STANDBY:
            return self._instance.view(self._shared.current())
        return self.query.desired

    def answers(self, tuple_: ControlTuple) -> bool:
        return self._instance.answers(tuple_)

    def limits(self) -> Limits:
        c = self.config
        return Limits(task_slots=c.max_task_slots, max_state_partitions=c.max_state_partitions,
                      max_offsets_per_trigger=c.max_offsets_per_trigger_limit,
                      max_shed_fraction=c.max_shed_fraction, udf_versions=self.plan.udf_versions,
                      max_executors=c.max_executors, master=str(self.spark.sparkContext.master),
                      unsupported=self.plan.unsupported() + self._state_store_unsupported()
                      + self._input_topic_unsupported())

    def _input_topic_unsupported(self) -> tuple[tuple[str, str], ...]:
        query = getattr(self, "query", None)  # None while the start-up values are checked
        reason = query.inputs.unsupported() if query is not None else None
        return (("input_topic", reason),) if reason else ()

    def _state_store_unsupported(self) -> tuple[tuple[str, str], ...]:
        """Why state partitions cannot change here: a checkpoint whose state store Spark
        cannot repartition (fixed at the query's first batch). A stateless job is the
        plan's to say (`Plan.unsupported`)."""
        if not self.plan.stateful:
            return ()
        try:
            provider = read_state_store_provider(self.config.checkpoint_dir)
        except StateRepartitionError:
            return ()  # no batch yet: the session's store applies
        if provider and provider != ROCKSDB_PROVIDER:
            return (("state_partitions", f"its checkpoint uses {provider.rsplit('.', 1)[-1]}; "
                                         "Spark repartitions only the RocksDB state store"),)
        return ()

    def advance_epoch(self, epoch: int, control_id: str) -> None:
        with self._lock:
            self.query.advance_epoch(epoch)
            self._record(control_id)

    def reconfigure(self, desired: DesiredState, control_id: str) -> Applied:
        with self._lock:  # the role may have changed since the tuple was evaluated
            if (self._instance.role is Role.STANDBY
                    or desired.active_instance != self.query.desired.active_instance):
                applied = self._instance.change_role(desired, self._shared.persist)
            else:
                applied = self._reconfigurer.apply(desired)
            self._record(control_id)
        log.info("reconfigured %s at epoch %d: %s; pause %d ms", self.config.query_id,
                 desired.epoch, applied.detail, applied.pause_ms)
        return applied

    def _record(self, control_id: str | None) -> None:
        """Persist and publish the state an active instance has in force (a standby owns
        neither), export it."""
        if self._instance.role is not Role.ACTIVE:
            return
        state = self.query.desired
        try:
            self._shared.record(state, control_id)
        except StaleWrite as exc:
            log.warning("%s: another instance owns the query now", exc)
        self.prometheus.shed_fraction.labels(self.config.query_id).set(state.shed_fraction)

    def _superseded(self) -> str | None:
        """Why this instance no longer owns the query (the gate asks before every batch)."""
        return self._shared.superseded(self.query.desired.epoch)

    def _request_executors(self) -> None:
        """On a cluster, ask for the desired executor count (configured or resumed) before
        the query's first batch; executors granted beyond it are released as they register
        (`run`)."""
        wanted = self.query.desired.executors
        if self._executors is not None and is_request("executors", wanted):
            self._executors.request_total(wanted)
            log.info("requested %d executors from %s", wanted, self.config.master)

    # -- lifecycle --
    def start(self) -> None:
        self._state_topic_exists = self._consumer.topic_exists(self.config.state_topic)
        if not self._state_topic_exists:
            log.warning("state topic %s does not exist: the desired state is persisted to %s "
                        "but not published (`streamctl stack up` creates the topic)",
                        self.config.state_topic, self.config.desired_state_path)
        if self._instance.role is Role.ACTIVE:
            self._request_executors()
            self.query.start_keeping_partitions(self.query.desired)
            self._record(None)
        for thread in self._threads:
            thread.start()
        self.prometheus.serve(self.config.metrics_port, self.config.metrics_endpoint)
        d, c = self.query.desired, self.config
        if self._instance.role is Role.STANDBY:
            threading.Thread(target=self._warm_up, name="streamctl-warm-up", daemon=True).start()
            log.info("job %s (instance %s) is a standby: SparkSession on %s up, no query, "
                     "heartbeat every %g s; it starts the query from %s when promoted",
                     c.query_id, c.instance_id, c.master, c.heartbeat_interval_s,
                     c.checkpoint_dir)
            return
        log.info("job %s (instance %s) started at epoch %d on %s: input %s → output %s, "
                 "input_parallelism %d, max_offsets_per_trigger %d, shed_fraction %g, udf %s, "
                 "task slots %d", c.query_id, c.instance_id, d.epoch, c.master, d.input_topic,
                 d.output_topic, d.input_parallelism, d.max_offsets_per_trigger,
                 d.shed_fraction, d.udf_version, self.query.task_slots())

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
            if (time.monotonic() >= next_retired_check
                    and self._instance.role is Role.ACTIVE):
                self.check_retired_inputs()
                next_retired_check = time.monotonic() + RETIRED_CHECK_S
            with self._lock:  # a query stopped by a reconfiguration is not a failure
                if self.query.is_active():
                    self._release_surplus_executors()
                step = self._supervisor.next_step()
            if step is not None and step.step is Step.EXIT:
                log.error("query %s is not running: %s", self.config.query_id, step.reason)
                return 1
            if step is not None and not stop.wait(step.delay_s):
                with self._lock:
                    self._supervisor.take(step)
        return 0

    def _release_surplus_executors(self) -> None:
        try:
            self.query.release_surplus_executors(QUIESCE_TIMEOUT_S)
        except Py4JError as exc:  # the next round tries again
            log.warning("could not release surplus executors: %s", exc)

    def check_retired_inputs(self) -> dict[str, int]:
        """Records appended to topics the job switched away from: never read unless the job
        switches back, so they are logged and exported, not left silent."""
        unread = self.query.inputs.unread_retired()
        for topic in self.query.inputs.current.retired:
            self.prometheus.unread_retired.labels(self.config.query_id, topic).set(
                unread.get(topic, 0))
        for topic, count in unread.items():
            if self._reported_unread.get(topic) == count:
                continue
            self._reported_unread[topic] = count
            log.error("%d records were appended to %s after the job switched its input away "
                      "from it: they are not read (their producers did not move); switching "
                      "the input back to %s reads them", count, topic, topic)
        return unread

    def _warm_up(self) -> None:
        try:
            log.info("standby warm-up: %s", self.query.warm_up())
        except Exception:  # a colder promotion, not a broken standby
            log.exception("standby warm-up failed; a promotion starts cold")

    def _watch_role(self) -> None:
        """The role thread: `standby.Instance.watch` every heartbeat interval."""
        while not self._stopping.wait(self.config.heartbeat_interval_s):
            try:
                with self._lock:
                    beat = self._instance.watch(lambda: self.desired, self._superseded)
                if beat is not None:
                    self._publisher.publish(self.config.metrics_topic, beat.query_id, beat)
            except Exception:  # e.g. an unreadable shared file: say so, keep watching
                log.exception("role check of %s failed", self.config.instance_id)

    def stop(self) -> None:
        """Quiesce and stop the query, then flush and close the Kafka clients."""
        self._stopping.set()
        for thread in self._threads:
            if thread.ident is not None:  # a job never started has no threads
                thread.join(timeout=QUIESCE_TIMEOUT_S + 60)
        try:
            with self._lock:
                self.query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
            self.query.close()
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
        undelivered = self._publisher.close()
        if undelivered:
            log.warning("%d metrics/ack records undelivered at shutdown", undelivered)
        log.info("job %s stopped", self.config.query_id)

    def _publish_progress(self, progress: StreamingQueryProgress, ctx: RunContext,
                          output_rows: int) -> None:
        metrics = to_task_metrics(progress, ctx, output_rows)
        warn_if_late_data(metrics)
        warn_if_shed(metrics)
        dead = dead_letters(progress)
        if dead:
            log.warning("batch %d: %d undecodable records sent to %s", metrics.batch_id, dead,
                        self.config.dlq_topic)
        self._last_metrics = metrics
        self._publisher.publish(self.config.metrics_topic, metrics.query_id, metrics)
        self.prometheus.record_batch(metrics, dead)

    def _publish_heartbeat(self, ctx: RunContext, at_ms: int) -> None:
        metrics = heartbeat(ctx, at_ms, self._last_metrics)
        self._publisher.publish(self.config.metrics_topic, metrics.query_id, metrics)

    def _publish_state(self, record: DesiredStateRecord) -> None:
        if self._state_topic_exists:
            self._publisher.publish(self.config.state_topic, self.config.query_id, record)

    def _send_ack(self, ack: Ack) -> None:
        self._publisher.publish(self.config.ack_topic, ack.query_id, ack)

    def _count_control(self, outcome: str, reason: str | None) -> None:
        self.prometheus.record_control(self.config.query_id, outcome, reason)
