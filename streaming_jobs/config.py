"""The job runtime's one typed, frozen configuration, read once at start-up (CLI options over
env vars over the job's declaration over defaults).

Owns the runtime's option names, their environment variables, defaults and validation, and
`bind`, which fills in what the job's declaration (`api.Job`) supplies: its query id and
topics, its function version, its own settings (`--set name=value`, `STREAMCTL_<NAME>`) and
where its checkpoint lives (`<state dir>/checkpoints/<job>/<query>`). Neighbours: `cli` builds
argparse options from the fields; everything else receives a `JobConfig`.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas import auth
from streamctl.options import Option, OptionError, options_of, read
from streamctl.security import kafka as kafka_security
from streamctl.security import metrics_http
from streamctl.security.kafka import KafkaSecurity
from streamctl.security.metrics_http import EndpointSecurity
from streaming_jobs.errors import UserError

if TYPE_CHECKING:
    from streaming_jobs.api import Job

STATE_DIR_ENV = "STREAMCTL_STATE_DIR"
DEFAULT_METRICS_PORT = 9301


class ConfigError(UserError):
    """A bad option; the message names the option and the accepted range."""


@dataclass(frozen=True)
class JobConfig:
    """Everything the bundled job and its elastic runtime need, validated."""

    bootstrap_servers: str
    """Kafka bootstrap servers (host:port[,host:port]) for data, metrics and control topics."""
    job: str = ""
    """The job to run: an installed job's name (`streamctl job list`) or an import path
    `package.module:attribute`; its declaration supplies the query id, topics and settings
    that the options below do not give."""
    query_id: str = ""
    """Stable name of the query; control tuples are addressed to it, metrics keyed by it.
    Default: the job's name."""
    instance_id: str = ""
    """This running instance; empty means hostname-pid (filled in by `from_sources`)."""
    input_topic: str = ""
    """The job's input topic; default: the one its declaration names."""
    output_topic: str = ""
    """The job's output topic; default: the one its declaration names."""
    dlq_topic: str = ""
    """Dead-letter topic for input records that fail to decode and output rows the output
    topic cannot take; default: the job's."""
    max_record_bytes: int = 1_000_000
    """The largest record the job writes, in bytes with its framing: an output row (key,
    value) or a dead letter (payload, headers). It is the producers' message.max.bytes, and
    may not exceed the output and dead-letter topics' max.message.bytes (checked at start).
    A row over it, or over its topic's limit, goes to the dead-letter topic; a dead letter
    over it keeps as much of its payload as fits. Input records may be as large as their
    topic takes."""
    metrics_topic: str = "streamctl.metrics"
    """Topic the job publishes its per-batch TaskMetrics and heartbeats to."""
    control_topic: str = "streamctl.control"
    """Topic of the controller's control tuples."""
    ack_topic: str = "streamctl.acks"
    """Topic the job answers each control tuple on."""
    state_dir: str = ""
    """Where the job keeps its checkpoint (and the files beside it): STREAMCTL_STATE_DIR, else
    the source checkout's .streamctl, else ~/.local/state/streamctl — never the directory the
    job happens to be started from."""
    checkpoint_dir: str = ""
    """Spark checkpoint location; empty means <state_dir>/checkpoints/<job>/<query_id>."""
    input_parallelism: int = 2
    """Initial Kafka source minPartitions (Spark tasks reading the input per batch)."""
    max_offsets_per_trigger: int = 4000
    """Cap on records per batch: keeps backlog visible as latest - end and quiesce short."""
    trigger_interval_s: float = 2.0
    """Micro-batch trigger interval in seconds."""
    state_partitions: int = 4
    """Initial partitions of the stateful operator (spark.sql.shuffle.partitions)."""
    task_slots: int = 16
    """Spark runs local[task_slots] (local mode); also the upper bound for input_parallelism
    there. On a cluster the executors' cores are the task slots."""
    metrics_port: int = DEFAULT_METRICS_PORT
    """Prometheus endpoint port; 0 turns it off. When the default, 9301, is taken (another
    job on this host), the job serves on a free port instead and says which (its log, its
    metrics records' metrics_address, `streamctl status`); any other port must be free, or
    the job refuses to start, before Spark."""
    metrics_host: str = "127.0.0.1"
    """Address the Prometheus endpoint listens on: this host only by default; 0.0.0.0 for
    every interface (compose sets it, so Prometheus can scrape the job's container)."""
    spark_jars: str = ""
    """Comma-separated jar paths for spark.jars (the Spark Kafka connector)."""
    max_runtime_s: float = 0.0
    """Stop cleanly after this many seconds; 0 runs until SIGTERM / Ctrl-C."""
    state_topic: str = "streamctl.state"
    """Compacted topic where the job publishes its desired state (keyed by query id)."""
    max_offsets_per_trigger_limit: int = 100_000
    """Highest batch cap a control tuple may set (throttle upper bound)."""
    max_state_partitions: int = 64
    """Highest state partition count a control tuple may set."""
    max_executors: int = 64
    """Highest executor count a control tuple may request on a cluster manager."""
    shed_fraction: float = 0.0
    """Initial fraction of low-priority input records dropped (load shedding)."""
    max_shed_fraction: float = 0.5
    """Highest shed fraction a control tuple may set; never all of the input."""
    input_drain_quiet_s: float = 5.0
    """An input switch waits until the old topic's end offsets have not moved for this long
    (and the job has read all of it): longer than two trigger intervals plus a producer's
    linger and retries, so a producer still writing the old topic is noticed and the switch
    refused instead of its later records being skipped."""
    input_drain_timeout_s: float = 120.0
    """Longest wait for the old topic to drain before an input switch is refused; the job
    keeps running on it meanwhile (the same bound as a quiesce)."""
    on_data_loss: str = "stop"
    """What the job does when records it had not read were deleted from its input
    (retention, or delete-records): `stop` reports the loss (its log, Prometheus, its metrics
    records, hence `streamctl status` and the decision log) and halts, the process up and
    reading nothing, until it is restarted with `skip`; `skip` reports it the same way and
    goes on from the earliest records still there."""
    udf_version: str = ""
    """Initial version of the job's swappable function; empty: the job's default."""
    spark_master: str = ""
    """Spark master URL: empty runs the job in local mode, local[task_slots], inside its own
    process; spark://host:port[,host:port] submits it to a Spark standalone cluster, whose
    executors then run its tasks and the `executors` control tuple resizes it."""
    spark_driver_host: str = ""
    """Address the executors reach this driver at (spark.driver.host), e.g. the job's service
    name in compose; empty: Spark's default (SPARK_LOCAL_IP, which the job sets to 127.0.0.1
    when unset, so a cluster on this machine works without it)."""
    executor_cores: int = 1
    """Cores per executor on a cluster (spark.executor.cores). One, so that several executors
    fit on a worker and each executor the controller asks for adds one task slot."""
    executor_memory_mb: int = 1024
    """Heap per executor on a cluster (spark.executor.memory); the bundled jobs keep little
    state per executor, and two executors fit a 2 GiB worker."""
    executors: int = 0
    """Executors to request at start on a cluster; 0: what the cluster manager grants (on
    standalone every free core, up to max_executors x executor_cores)."""
    role: str = "active"
    """How this instance starts: `active` runs the query; `standby` builds its SparkSession,
    runs no query, heartbeats and waits to be promoted by the controller. Instances of one
    query share its checkpoint directory. After a failover the instance named in the desired
    state beside the checkpoint is the active one, whatever this option says."""
    heartbeat_interval_s: float = 5.0
    """Seconds between heartbeats of an instance that runs no batch (a standby, or an idle
    active: Spark's idle progress events are set to this interval). They carry the figures of
    an idle query (no arrivals, no backlog); liveness comes from the beats."""
    beat_interval_s: float = 1.0
    """Seconds between an active instance's liveness beats, sent whatever its batches do
    (which batch runs, since when, to which offsets); the controller takes a few missed beats
    as the instance lost (`lost_after_beats`), so a standby takes over within seconds. 0
    sends none: the controller then judges liveness by batches and idle heartbeats alone."""
    control_key: bytes = field(default=b"", repr=False, compare=False)
    """HMAC key control tuples must be signed with; from STREAMCTL_CONTROL_KEY or the file named
    by STREAMCTL_CONTROL_KEY_FILE, never from a command-line option (it would show in `ps`)."""
    kafka_security: KafkaSecurity = kafka_security.PLAINTEXT
    """How every Kafka client of the job (Spark's source, the sinks, metrics, acks, control,
    dead letters) authenticates; from the STREAMCTL_KAFKA_* variables
    (`streamctl.security.kafka`)."""
    metrics_endpoint: EndpointSecurity = metrics_http.PLAIN
    """TLS and basic auth of the Prometheus endpoint; from the STREAMCTL_METRICS_* variables
    (`streamctl.security.metrics_http`)."""
    settings: tuple[tuple[str, Any], ...] = ()
    """The job's own settings in force (name, value), each declared by the job; from
    `--set name=value` or STREAMCTL_<NAME>, else the declared default (`bind`)."""

    def __post_init__(self) -> None:
        for problem in _problems(self):
            raise ConfigError(problem)

    @property
    def local(self) -> bool:
        """Whether Spark runs in local mode, inside the job's process."""
        return not self.spark_master

    @property
    def master(self) -> str:
        """The Spark master URL the session is built with."""
        return self.spark_master or f"local[{self.task_slots}]"

    @property
    def max_task_slots(self) -> int:
        """Most tasks the job can run at once, which bounds input_parallelism: local[N]'s N, or
        on a cluster every executor it may request times its cores."""
        return self.task_slots if self.local else self.max_executors * self.executor_cores

    @property
    def spark_kafka_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink: the brokers and how to log in to them."""
        return {"kafka.bootstrap.servers": self.bootstrap_servers,
                **self.kafka_security.spark_options()}

    @property
    def metrics_address(self) -> str:
        """Where Prometheus reaches the job (host:port, this host's name when it listens on
        every interface); empty when it serves no endpoint."""
        if not self.metrics_port:
            return ""
        wildcard = self.metrics_host in ("0.0.0.0", "::")
        return f"{socket.gethostname() if wildcard else self.metrics_host}:{self.metrics_port}"

    @property
    def jar_list(self) -> tuple[str, ...]:
        return tuple(j.strip() for j in self.spark_jars.split(",") if j.strip())

    @property
    def settings_map(self) -> dict[str, Any]:
        return dict(self.settings)

    @property
    def desired_state_path(self) -> str:
        """Where the applied desired state is persisted: beside the checkpoint directory (not
        inside it, which belongs to Spark)."""
        return self.checkpoint_dir.rstrip("/") + ".desired-state.json"

    @property
    def input_source_path(self) -> str:
        """Where the input source (topic, source generation, retired topics) is recorded,
        beside the checkpoint (see `runtime.checkpoint.input_source`)."""
        return self.checkpoint_dir.rstrip("/") + ".input-source.json"

    @classmethod
    def from_sources(
        cls, job: Job, options: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> JobConfig:
        """Options (non-None values win) over `STREAMCTL_<FIELD>` env vars over the job's
        declaration over defaults; `options["settings"]` are the `name=value` texts of
        `--set`."""
        env = os.environ if env is None else env
        options = options or {}
        try:
            values = read(option_list(), options, env)
        except OptionError as exc:
            raise ConfigError(str(exc)) from None
        if "bootstrap_servers" not in values:
            raise ConfigError("--bootstrap-servers (or STREAMCTL_BOOTSTRAP_SERVERS) is required")
        values.setdefault("instance_id", f"{socket.gethostname()}-{os.getpid()}")
        values.setdefault("state_dir", str(default_state_dir(env)))
        values["settings"] = tuple(job_settings(job, options.get("settings") or (), env).items())
        values["control_key"] = _control_key(env)
        values["kafka_security"] = _kafka_security(env)
        values["metrics_endpoint"] = _metrics_endpoint(env)
        return bind(cls(**values), job)


def bind(config: JobConfig, job: Job) -> JobConfig:
    """`config` with what `job` declares filled in where the options left it empty, checked
    against the declaration; `ConfigError` naming the job when they disagree."""
    query_id = config.query_id or job.name
    state_dir = Path(config.state_dir or default_state_dir()).expanduser().resolve()
    checkpoint = config.checkpoint_dir or str(state_dir / "checkpoints" / job.name / query_id)
    bound = replace(
        config, job=config.job or job.name, query_id=query_id, state_dir=str(state_dir),
        input_topic=config.input_topic or job.topics.input,
        output_topic=config.output_topic or job.topics.output,
        dlq_topic=config.dlq_topic or job.topics.resolved_dead_letters(),
        checkpoint_dir=checkpoint, udf_version=config.udf_version or job.function_version,
        settings=tuple(job_settings(job, (), {}, dict(config.settings)).items()))
    if job.functions and bound.udf_version not in job.functions:
        raise ConfigError(f"udf_version {bound.udf_version!r} is not a version of job "
                          f"{job.name!r}: {', '.join(job.functions)}")
    if not job.functions and bound.udf_version:
        raise ConfigError(f"udf_version {bound.udf_version!r}: job {job.name!r} declares no "
                          "function versions")
    return bound


def job_settings(job: Job, assignments: Sequence[str], env: Mapping[str, str],
                 given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The job's settings: `given` values, then `name=value` assignments (`--set`), then
    STREAMCTL_<NAME> variables, then the declared defaults; every value checked."""
    values = dict(given or {})
    declared = {s.name: s for s in job.settings}
    known = ", ".join(declared) or "none"
    for name in values:
        if name not in declared:
            raise ConfigError(f"job {job.name!r} has no setting {name!r} (its settings: "
                              f"{known})")
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name = name.strip()
        if not sep or name not in declared:
            raise ConfigError(f"--set {assignment!r}: job {job.name!r} has no setting "
                              f"{name!r} (its settings: {known}); write --set name=value")
        values[name] = _setting_value(job, name, text)
    for name in declared:
        if name not in values and env.get(env_var(name)) is not None:
            values[name] = _setting_value(job, name, env[env_var(name)])
    for name, value in list(values.items()):
        if isinstance(value, str) and not isinstance(declared[name].default, str):
            values[name] = _setting_value(job, name, value)
    return {name: values.get(name, s.default) for name, s in declared.items()}


def _setting_value(job: Job, name: str, text: str) -> Any:
    try:
        return job.setting(name).parse(text)
    except ValueError as exc:
        raise ConfigError(f"setting {name!r} of job {job.name!r}: {exc}") from None


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$STREAMCTL_STATE_DIR`, else the source checkout's `.streamctl` (git-ignored), else the
    user's state directory; never the current directory, so a job started from elsewhere
    finds its checkpoint. `streamctl.stack.defaults.default_state_dir` is the same rule (a test
    keeps them equal)."""
    env = os.environ if env is None else env
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".streamctl"
    state_home = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "streamctl"


ROLES = ("active", "standby")
"""Values of `JobConfig.role`."""
ON_DATA_LOSS = ("stop", "skip")
"""Values of `JobConfig.on_data_loss` (`runtime.checkpoint.retention`)."""

ENV_ONLY = frozenset({"control_key", "kafka_security", "metrics_endpoint"})
"""Fields read only from the environment (secrets), never from options."""

DERIVED = frozenset({"settings"})
"""Fields not read as options of their own: the job's settings come from `--set`."""

OWN_VARIABLES = frozenset({"kafka_security", "metrics_endpoint"})
"""Fields read from variables of their own (`streamctl.security.kafka.ENV_NAMES`,
`streamctl.security.metrics_http.ENV_NAMES`), not from STREAMCTL_<FIELD>."""


def _kafka_security(env: Mapping[str, str]) -> KafkaSecurity:
    try:
        return kafka_security.from_env(env)
    except kafka_security.KafkaSecurityError as exc:
        raise ConfigError(f"Kafka security: {exc}") from None


def _metrics_endpoint(env: Mapping[str, str]) -> EndpointSecurity:
    try:
        return metrics_http.from_env(env)
    except metrics_http.EndpointSecurityError as exc:
        raise ConfigError(f"metrics endpoint: {exc}") from None


def _control_key(env: Mapping[str, str]) -> bytes:
    """Fail closed: a job without a key would have to accept anyone's control tuples."""
    try:
        key = auth.key_from_env(env)
    except auth.ControlKeyError as exc:
        raise ConfigError(str(exc)) from None
    if key is None:
        raise ConfigError(f"no control key: set {auth.KEY_ENV} or {auth.KEY_FILE_ENV} (the "
                          "controller's key); the job refuses to start without one, since it "
                          "could not tell the controller's control tuples from anyone else's")
    return key


def env_var(field_name: str) -> str:
    return f"STREAMCTL_{field_name.upper()}"


def option_list() -> list[Option]:
    """The job's options (`streamctl.options`, the loader the controller shares): every field but
    the secrets and the job's own settings, `--<field>` and STREAMCTL_<FIELD>."""
    return options_of(JobConfig, env_var, skip=ENV_ONLY | DERIVED)


def _problems(c: JobConfig) -> list[str]:
    positive = {
        "input_parallelism": c.input_parallelism, "max_offsets_per_trigger":
        c.max_offsets_per_trigger, "trigger_interval_s": c.trigger_interval_s,
        "state_partitions": c.state_partitions, "task_slots": c.task_slots,
    }
    problems = [f"{k} must be > 0, got {v}" for k, v in positive.items() if v <= 0]
    if c.max_record_bytes < MIN_RECORD_BYTES:
        problems.append(f"max_record_bytes must be at least {MIN_RECORD_BYTES} (room for a "
                        f"dead letter's headers), got {c.max_record_bytes}")
    if c.max_offsets_per_trigger > c.max_offsets_per_trigger_limit:
        problems.append(f"max_offsets_per_trigger {c.max_offsets_per_trigger} exceeds "
                        f"max_offsets_per_trigger_limit {c.max_offsets_per_trigger_limit}")
    if c.state_partitions > c.max_state_partitions:
        problems.append(f"state_partitions {c.state_partitions} exceeds max_state_partitions "
                        f"{c.max_state_partitions}")
    limits = {"max_offsets_per_trigger_limit": c.max_offsets_per_trigger_limit,
              "max_state_partitions": c.max_state_partitions, "max_executors": c.max_executors,
              "executor_cores": c.executor_cores}
    problems += [f"{k} must be > 0, got {v}" for k, v in limits.items() if v <= 0]
    if c.input_parallelism > c.max_task_slots:
        bound = ("task_slots" if c.local
                 else "max_executors x executor_cores on a cluster")
        problems.append(f"input_parallelism {c.input_parallelism} exceeds {bound} "
                        f"{c.max_task_slots}")
    problems += _cluster_problems(c)
    if not 0 <= c.max_shed_fraction < 1:
        problems.append(f"max_shed_fraction must be in [0, 1), got {c.max_shed_fraction}")
    if not 0 <= c.shed_fraction <= c.max_shed_fraction:
        problems.append(f"shed_fraction must be in [0, max_shed_fraction="
                        f"{c.max_shed_fraction}], got {c.shed_fraction}")
    if c.input_drain_quiet_s <= 0 or c.input_drain_timeout_s < c.input_drain_quiet_s:
        problems.append(f"input_drain_quiet_s must be > 0 and at most input_drain_timeout_s, "
                        f"got {c.input_drain_quiet_s} and {c.input_drain_timeout_s}")
    if c.on_data_loss not in ON_DATA_LOSS:
        problems.append(f"on_data_loss must be one of {', '.join(ON_DATA_LOSS)}, got "
                        f"{c.on_data_loss!r}")
    if c.role not in ROLES:
        problems.append(f"role must be one of {', '.join(ROLES)}, got {c.role!r}")
    if c.heartbeat_interval_s <= 0:
        problems.append(f"heartbeat_interval_s must be > 0, got {c.heartbeat_interval_s}")
    if c.beat_interval_s < 0:
        problems.append(f"beat_interval_s must be >= 0 (0: no beats), got {c.beat_interval_s}")
    if c.max_runtime_s < 0:
        problems.append(f"max_runtime_s must be >= 0, got {c.max_runtime_s}")
    if not 0 <= c.metrics_port <= 65535:
        problems.append(f"metrics_port must be 0 (off) or a TCP port, got {c.metrics_port}")
    topics = ("metrics_topic", "control_topic", "ack_topic", "state_topic", "bootstrap_servers",
              "metrics_host")
    problems += [f"{t} must not be empty" for t in topics if not getattr(c, t).strip()]
    if c.input_topic and c.input_topic == c.output_topic:
        problems.append(f"input_topic and output_topic are both {c.input_topic!r}")
    return problems


MIN_RECORD_BYTES = 4096
"""Below this a dead letter's headers (origin, reason, size) would leave no room for its
payload."""
_STANDALONE_MASTER = re.compile(r"spark://[^\s:/,]+:\d{1,5}(,[^\s:/,]+:\d{1,5})*")
MIN_EXECUTOR_MEMORY_MB = 450
"""Spark refuses smaller executors (1.5 x its 300 MiB reserved memory)."""


def _cluster_problems(c: JobConfig) -> list[str]:
    problems = []
    if c.spark_master and not _STANDALONE_MASTER.fullmatch(c.spark_master):
        problems.append(
            f"spark_master must be empty (local mode, local[task_slots]) or a Spark standalone "
            f"master spark://host:port[,host:port], got {c.spark_master!r}; for local mode set "
            "task_slots instead, and Kubernetes or YARN need settings this job does not have")
    if c.executor_memory_mb < MIN_EXECUTOR_MEMORY_MB:
        problems.append(f"executor_memory_mb must be >= {MIN_EXECUTOR_MEMORY_MB} (Spark's "
                        f"minimum), got {c.executor_memory_mb}")
    if c.executors and c.local:
        problems.append(f"executors {c.executors} needs a cluster (spark_master); local mode "
                        "runs local[task_slots] in the job's process")
    if not 0 <= c.executors <= c.max_executors:
        problems.append(f"executors must be in [0, max_executors={c.max_executors}], "
                        f"got {c.executors}")
    return problems
