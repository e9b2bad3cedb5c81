"""The job runtime's one typed, frozen configuration, in groups, read once at start-up (CLI
options over env vars over the job's declaration over defaults).

Owns the runtime's settings in groups (`Identity`, `JobTopics`, `Storage`, `SparkSettings`,
`InitialKnobs`, `Bounds` (defined beside the parameter registry that checks a knob against
them), `Timing`, `Endpoint`, `Objectives`, `Security`; a room of the runtime takes the groups
it needs), their option names and environment variables (the fields' flat names, unique
across the groups:
`--input-topic`, STREAMCTL_INPUT_TOPIC), defaults and validation, and `bind`,
which fills in what the job's declaration (`api.Job`) supplies: its query id and topics, its
function version, its own settings (`--set name=value`, `STREAMCTL_<NAME>`) and where its
checkpoint lives (`<state dir>/checkpoints/<job>/<query>`). Neighbours: `cli` builds argparse
options from the fields; the runtime receives a `JobConfig`.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas import auth, topics
from schemas.knobs import UDF_VERSION
from schemas.objectives import Objectives
from streamctl.options import Option, OptionError, options_of, read
from streamctl.security import TransportSecurity, TransportSecurityError, metrics_http
from streamctl.security import kafka as kafka_security
from streamctl.security.kafka import KafkaSecurity
from streamctl.security.metrics_http import EndpointSecurity
from streaming_jobs.errors import UserError
from streaming_jobs.runtime.desired.state import (
    REGISTRY,
    BadValue,
    Bounds,
    DesiredState,
    Limits,
    start_problems,
)

if TYPE_CHECKING:
    from streaming_jobs.api import Job

STATE_DIR_ENV = "STREAMCTL_STATE_DIR"
DEFAULT_METRICS_PORT = 9301


class ConfigError(UserError):
    """A bad option; the message names the option and the accepted range."""


@dataclass(frozen=True)
class Identity:
    """Who the running instance is."""

    job: str = ""
    """The job to run: an installed job's name (`streamctl job list`) or an import path
    `package.module:attribute`; its declaration supplies the query id, topics and settings
    that the options below do not give."""

    query_id: str = ""
    """Stable name of the query; control tuples are addressed to it, metrics keyed by it.
    Default: the job's name."""

    instance_id: str = ""
    """This running instance; empty means hostname-pid (filled in by `from_sources`)."""

    role: str = "active"
    """How this instance starts: `active` runs the query; `standby` builds its SparkSession,
    runs no query, heartbeats and waits to be promoted by the controller. Instances of one
    query share its checkpoint directory. After a failover the instance named in the desired
    state beside the checkpoint is the active one, whatever this option says."""

    standby: str = "warm"
    """What a standby keeps ready: `warm`, a built SparkSession, or `hot`, the query itself
    on the instance's own checkpoint. Warm, promoted, it restores the state from the shared
    checkpoint. Hot, it runs the query on its own copy of the checkpoint into nothing, trailing
    the active's commits, so a promotion finds the state current; such an instance keeps its
    own checkpoint, `<checkpoint-dir>.instance-<instance id>`, and costs a second run of the
    job. Instances of a query may differ while the setting is changed one at a time: a
    promoted instance continues the output from whichever checkpoint wrote its last batch."""



@dataclass(frozen=True)
class JobTopics:
    """The topics the job reads and writes."""

    input_topic: str = ""
    """The job's input topic; default: the one its declaration names."""

    output_topic: str = ""
    """The job's output topic; default: the one its declaration names."""

    dlq_topic: str = ""
    """Dead-letter topic for input records that fail to decode and output rows the output
    topic cannot take; default: the job's."""

    metrics_topic: str = topics.METRICS
    """Topic the job publishes its per-batch TaskMetrics and heartbeats to."""

    control_topic: str = topics.CONTROL
    """Topic of the controller's control tuples."""

    ack_topic: str = topics.ACKS
    """Topic the job answers each control tuple on."""

    state_topic: str = topics.STATE
    """Compacted topic where the job publishes its desired state (keyed by query id)."""



@dataclass(frozen=True)
class Storage:
    """Where the job keeps its checkpoint and the files beside it."""

    state_dir: str = ""
    """Where the job keeps its checkpoint (and the files beside it): STREAMCTL_STATE_DIR, else
    the source checkout's .streamctl, else ~/.local/state/streamctl — never the directory the
    job happens to be started from."""

    checkpoint_dir: str = ""
    """Spark checkpoint location; empty means <state_dir>/checkpoints/<job>/<query_id>."""

    query_dir: str = ""
    """The query's checkpoint location, shared by its instances (set by `bind`): the same as
    `checkpoint_dir`, which with a hot standby is this instance's own beside it."""

    @property
    def desired_state_path(self) -> str:
        """Where the applied desired state is persisted: beside the query's checkpoint
        directory (not inside it, which belongs to Spark), one for all its instances."""
        return (self.query_dir or self.checkpoint_dir).rstrip("/") + ".desired-state.json"

    @property
    def input_source_path(self) -> str:
        """Where the input source (topic, source generation, retired topics) is recorded,
        beside the checkpoint (see `runtime.checkpoint.input_source`)."""
        return self.checkpoint_dir.rstrip("/") + INPUT_RECORD_SUFFIX

@dataclass(frozen=True)
class SparkSettings:
    """Where Spark runs the job, and with what."""

    spark_master: str = ""
    """Spark master URL: empty runs the job in local mode, local[task_slots], inside its own
    process; spark://host:port[,host:port] submits it to a Spark standalone cluster, whose
    executors then run its tasks and the `executors` control tuple resizes it."""

    spark_driver_host: str = ""
    """Address the executors reach this driver at (spark.driver.host), e.g. the job's service
    name in compose; empty: Spark's default (SPARK_LOCAL_IP, which the job sets to 127.0.0.1
    when unset, so a cluster on this machine works without it)."""

    task_slots: int = 16
    """Spark runs local[task_slots] (local mode); also the upper bound for input_parallelism
    there. On a cluster the executors' cores are the task slots."""

    executor_cores: int = 1
    """Cores per executor on a cluster (spark.executor.cores). One, so that several executors
    fit on a worker and each executor the controller asks for adds one task slot."""

    executor_memory_mb: int = 1024
    """Heap per executor on a cluster (spark.executor.memory); the bundled jobs keep little
    state per executor, and two executors fit a 2 GiB worker."""

    spark_jars: str = ""
    """Comma-separated jar paths for spark.jars (the Spark Kafka connector)."""

    cluster_priority: int = 0
    """How this job ranks when the jobs sharing a cluster want more free cores than it has:
    the controller (with `--spark-master-status-url`) grants them to higher priorities first,
    then to the jobs furthest over their capacity. Only on a cluster."""

    @property
    def local(self) -> bool:
        """Whether Spark runs in local mode, inside the job's process."""
        return not self.spark_master

    @property
    def master(self) -> str:
        """The Spark master URL the session is built with."""
        return self.spark_master or f"local[{self.task_slots}]"

    @property
    def jar_list(self) -> tuple[str, ...]:
        return tuple(j.strip() for j in self.spark_jars.split(",") if j.strip())

@dataclass(frozen=True)
class InitialKnobs:
    """The knobs' values at the first start (a control tuple changes them later; the desired
    state beside the checkpoint keeps them across restarts)."""

    input_parallelism: int = 2
    """Initial Kafka source minPartitions (Spark tasks reading the input per batch)."""

    state_partitions: int = 4
    """Initial partitions of the stateful operator (spark.sql.shuffle.partitions)."""

    max_offsets_per_trigger: int = 4000
    """Cap on records per batch: keeps backlog visible as latest - end and quiesce short."""

    shed_fraction: float = 0.0
    """Initial fraction of low-priority input records dropped (load shedding)."""

    udf_version: str = ""
    """Initial version of the job's swappable function; empty: the job's default."""

    executors: int = 0
    """Executors to request at start on a cluster; 0: what the cluster manager grants (on
    standalone every free core, up to max_executors x executor_cores)."""



@dataclass(frozen=True)
class Timing:
    """The job's clocks: batches, heartbeats, beats, its run, an input switch's drain."""

    trigger_interval_s: float = 2.0
    """Micro-batch trigger interval in seconds."""

    heartbeat_interval_s: float = 5.0
    """Seconds between heartbeats of an instance that runs no batch (a standby, or an idle
    active: Spark's idle progress events are set to this interval). They carry the figures of
    an idle query (no arrivals, no backlog); liveness comes from the beats."""

    beat_interval_s: float = 1.0
    """Seconds between an active instance's liveness beats, sent whatever its batches do
    (which batch runs, since when, to which offsets); the controller takes a few missed beats
    as the instance lost (`lost_after_beats`), so a standby takes over within seconds. 0
    sends none: the controller then judges liveness by batches and idle heartbeats alone."""

    max_runtime_s: float = 0.0
    """Stop cleanly after this many seconds; 0 runs until SIGTERM / Ctrl-C."""

    input_drain_quiet_s: float = 5.0
    """An input switch waits until the old topic's end offsets have not moved for this long
    (and the job has read all of it): longer than two trigger intervals plus a producer's
    linger and retries, so a producer still writing the old topic is noticed and the switch
    refused instead of its later records being skipped."""

    input_drain_timeout_s: float = 120.0
    """Longest wait for the old topic to drain before an input switch is refused; the job
    keeps running on it meanwhile (the same bound as a quiesce)."""



@dataclass(frozen=True)
class Endpoint:
    """The Prometheus endpoint."""

    metrics_port: int = DEFAULT_METRICS_PORT
    """Prometheus endpoint port; 0 turns it off. When the default, 9301, is taken (another
    job on this host), the job serves on a free port instead and says which (its log, its
    metrics records' metrics_address, `streamctl status`); any other port must be free, or
    the job refuses to start, before Spark."""

    metrics_host: str = "127.0.0.1"
    """Address the Prometheus endpoint listens on: this host only by default; 0.0.0.0 for
    every interface (compose sets it, so Prometheus can scrape the job's container)."""

    @property
    def address(self) -> str:
        """Where Prometheus reaches the job (host:port, this host's name when it listens on
        every interface); empty when it serves no endpoint."""
        if not self.metrics_port:
            return ""
        wildcard = self.metrics_host in ("0.0.0.0", "::")
        return f"{socket.gethostname() if wildcard else self.metrics_host}:{self.metrics_port}"


@dataclass(frozen=True)
class Security:
    """How the job's clients and endpoint prove themselves, and whose control tuples it
    accepts: each from the environment only, never a command-line option (it would show in
    `ps`)."""

    kafka_security: KafkaSecurity = kafka_security.PLAINTEXT
    """How every Kafka client of the job (Spark's source, the sinks, metrics, acks, control,
    dead letters) authenticates; from the STREAMCTL_KAFKA_* variables
    (`streamctl.security.kafka`)."""

    endpoint_security: EndpointSecurity = metrics_http.PLAIN
    """TLS and basic auth of the Prometheus endpoint; from the STREAMCTL_METRICS_* variables
    (`streamctl.security.metrics_http`)."""

    control_key: bytes = field(default=b"", repr=False, compare=False)
    """HMAC key control tuples must be signed with; from STREAMCTL_CONTROL_KEY or the file named
    by STREAMCTL_CONTROL_KEY_FILE."""


@dataclass(frozen=True)
class RunSettings:
    """What a run of the job's plan reads besides the knobs (derived, not an option group):
    the query it is, how Spark's Kafka source reaches the brokers, the job's own settings."""

    query_id: str
    kafka_options: Mapping[str, str]
    """Options of Spark's Kafka source and sink: the brokers and how to log in to them."""
    settings: tuple[tuple[str, Any], ...]
    """The job's own settings in force (`JobConfig.settings`)."""

    @property
    def settings_map(self) -> dict[str, Any]:
        return dict(self.settings)


GROUPS: dict[str, type] = {
    "identity": Identity, "topics": JobTopics, "storage": Storage, "spark": SparkSettings,
    "initial": InitialKnobs, "bounds": Bounds, "timing": Timing, "endpoint": Endpoint,
    "objectives": Objectives, "security": Security,
}
"""`JobConfig`'s groups by attribute name. Each room of the runtime takes the groups it needs;
the options and variables keep the fields' flat names (`--input-topic`,
STREAMCTL_INPUT_TOPIC), unique across the groups."""


@dataclass(frozen=True)
class JobConfig:
    """Everything a job's elastic runtime needs, in groups, validated."""

    bootstrap_servers: str
    """Kafka bootstrap servers (host:port[,host:port]) for data, metrics and control topics."""
    identity: Identity = field(default_factory=Identity)
    topics: JobTopics = field(default_factory=JobTopics)
    storage: Storage = field(default_factory=Storage)
    spark: SparkSettings = field(default_factory=SparkSettings)
    initial: InitialKnobs = field(default_factory=InitialKnobs)
    bounds: Bounds = field(default_factory=Bounds)
    timing: Timing = field(default_factory=Timing)
    endpoint: Endpoint = field(default_factory=Endpoint)
    objectives: Objectives = field(default_factory=Objectives)
    security: Security = field(default_factory=Security)
    on_data_loss: str = "stop"
    """What the job does when records it had not read were deleted from its input
    (retention, or delete-records): `stop` reports the loss (its log, Prometheus, its metrics
    records, hence `streamctl status` and the decision log) and halts, the process up and
    reading nothing, until it is restarted with `skip`; `skip` reports it the same way and
    goes on from the earliest records still there."""
    settings: tuple[tuple[str, Any], ...] = ()
    """The job's own settings in force (name, value), each declared by the job; from
    `--set name=value` or STREAMCTL_<NAME>, else the declared default (`bind`)."""

    def __post_init__(self) -> None:
        for problem in _problems(self):
            raise ConfigError(problem)

    @property
    def max_task_slots(self) -> int:
        """Most tasks the job can run at once, which bounds input_parallelism: local[N]'s N, or
        on a cluster every executor it may request times its cores."""
        s = self.spark
        return s.task_slots if s.local else self.bounds.max_executors * s.executor_cores

    @property
    def run(self) -> RunSettings:
        """What a run of the plan reads of these settings."""
        return RunSettings(self.identity.query_id,
                           {"kafka.bootstrap.servers": self.bootstrap_servers,
                            **self.security.kafka_security.spark_options()}, self.settings)

    def initial_state(self) -> DesiredState:
        """The desired state before any control tuple: the knobs' starting values, epoch 0."""
        # Each of `InitialKnobs`' fields is the starting value of the parameter of its name.
        return DesiredState(epoch=0, input_topic=self.topics.input_topic,
                            output_topic=self.topics.output_topic, **asdict(self.initial))

    def limits(self) -> Limits:
        """What bounds a knob's value by these settings alone (the runtime adds what the job
        and its checkpoint rule out, and the master Spark reports)."""
        return Limits(task_slots=self.max_task_slots, udf_versions=(), master=self.spark.master,
                      bounds=self.bounds)

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
        try:
            transport = TransportSecurity.from_env(env)
        except TransportSecurityError as exc:
            raise ConfigError(str(exc)) from None
        values["kafka_security"] = transport.kafka
        values["endpoint_security"] = transport.metrics_endpoint
        return bind(grouped(values), job)


def grouped(values: Mapping[str, Any]) -> JobConfig:
    """A `JobConfig` from flat field names (`input_topic=…`), each put in its group."""
    top, groups = _by_group(values)
    return JobConfig(**top, **{name: GROUPS[name](**fields_) for name, fields_ in groups.items()})


def changed(config: JobConfig, **values: Any) -> JobConfig:
    """`config` with fields of any group changed by their flat names."""
    top, groups = _by_group(values)
    return replace(config, **top, **{name: replace(getattr(config, name), **fields_)
                                     for name, fields_ in groups.items()})


def _by_group(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    top: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        group = GROUP_OF.get(name)
        if group is None:
            top[name] = value
        else:
            groups.setdefault(group, {})[name] = value
    return top, groups


GROUP_OF = {f.name: group for group, cls in GROUPS.items() for f in fields(cls)}
"""Each grouped field's group (every top-level field is absent)."""


def bind(config: JobConfig, job: Job) -> JobConfig:
    """`config` with what `job` declares filled in where the options left it empty, checked
    against the declaration; `ConfigError` naming the job when they disagree."""
    ident, topics, initial = config.identity, config.topics, config.initial
    query_id = ident.query_id or job.name
    state_dir = Path(config.storage.state_dir or default_state_dir()).expanduser().resolve()
    query_dir = (config.storage.query_dir or config.storage.checkpoint_dir
                 or str(state_dir / "checkpoints" / job.name / query_id))
    checkpoint = (instance_dir(query_dir, ident.instance_id) if ident.standby == "hot"
                  else query_dir)
    udf_version = initial.udf_version or job.initial_udf_version
    if job.functions:
        limits = replace(config.limits(), udf_versions=tuple(job.functions))
        try:
            REGISTRY[UDF_VERSION].parse(udf_version, limits)
        except BadValue as exc:
            raise ConfigError(f"udf_version {udf_version!r} of job {job.name!r}: {exc}") from None
    if not job.functions and udf_version:
        raise ConfigError(f"udf_version {udf_version!r}: job {job.name!r} declares no "
                          "function versions")
    return changed(
        config, job=ident.job or job.name, query_id=query_id, state_dir=str(state_dir),
        input_topic=topics.input_topic or job.topics.input,
        output_topic=topics.output_topic or job.topics.output,
        dlq_topic=topics.dlq_topic or job.topics.resolved_dead_letters(),
        checkpoint_dir=checkpoint, query_dir=query_dir, udf_version=udf_version,
        max_delay_s=config.objectives.max_delay_s or job.objectives.max_delay_s,
        drain_within_s=config.objectives.drain_within_s or job.objectives.drain_within_s,
        settings=tuple(job_settings(job, (), {}, dict(config.settings)).items()))


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


INPUT_RECORD_SUFFIX = ".input-source.json"
"""The input record beside a checkpoint (`runtime.checkpoint.input_source`)."""
INSTANCE_INFIX = ".instance-"
"""`<checkpoint-dir>.instance-<instance id>`: an instance's own checkpoint with a hot standby."""


def instance_dir(query_dir: str, instance_id: str) -> str:
    return f"{query_dir.rstrip('/')}{INSTANCE_INFIX}{instance_id}"


ROLES = ("active", "standby")
"""Values of `JobConfig.role`."""
STANDBYS = ("warm", "hot")
"""Values of `JobConfig.standby`."""
ON_DATA_LOSS = ("stop", "skip")
"""Values of `JobConfig.on_data_loss` (`runtime.checkpoint.retention`)."""

ENV_ONLY = frozenset({"control_key", "kafka_security", "endpoint_security"})
"""Fields read only from the environment (secrets), never from options."""

DERIVED = frozenset({"settings", "query_dir"})
"""Fields not read as options of their own: the job's settings come from `--set`, the query's
checkpoint directory from `bind`."""

OWN_VARIABLES = frozenset({"kafka_security", "endpoint_security"})
"""Fields read from variables of their own (`streamctl.security.kafka.ENV_NAMES`,
`streamctl.security.metrics_http.ENV_NAMES`), not from STREAMCTL_<FIELD>."""


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
    """The job's options (`streamctl.options`, the loader the controller shares): every field
    of `JobConfig` and of its groups but the secrets and the job's own settings,
    `--<field>` and STREAMCTL_<FIELD>."""
    return [o for cls in (JobConfig, *GROUPS.values())
            for o in options_of(cls, env_var, skip=ENV_ONLY | DERIVED)]


def flat_fields() -> list[Field[Any]]:
    """Every setting's field, the groups' included, by the name its option carries."""
    return [f for f in fields(JobConfig) if f.name not in GROUPS] + [
        f for cls in GROUPS.values() for f in fields(cls)]


def _problems(c: JobConfig) -> list[str]:
    b, t, s = c.bounds, c.timing, c.spark
    positive = {"trigger_interval_s": t.trigger_interval_s, "task_slots": s.task_slots,
                "max_offsets_per_trigger_limit": b.max_offsets_per_trigger_limit,
                "max_state_partitions": b.max_state_partitions,
                "max_executors": b.max_executors, "executor_cores": s.executor_cores,
                "heartbeat_interval_s": t.heartbeat_interval_s}
    problems = [f"{name} must be > 0, got {v}" for name, v in positive.items() if v <= 0]
    problems += _knob_problems(c) + _cluster_problems(c)
    problems += c.objectives.problems(t.trigger_interval_s)
    if b.max_record_bytes < MIN_RECORD_BYTES:
        problems.append(f"max_record_bytes must be at least {MIN_RECORD_BYTES} (room for a "
                        f"dead letter's headers), got {b.max_record_bytes}")
    if not 0 <= b.max_shed_fraction < 1:
        problems.append(f"max_shed_fraction must be in [0, 1), got {b.max_shed_fraction}")
    if t.input_drain_quiet_s <= 0 or t.input_drain_timeout_s < t.input_drain_quiet_s:
        problems.append(f"input_drain_quiet_s must be > 0 and at most input_drain_timeout_s, "
                        f"got {t.input_drain_quiet_s} and {t.input_drain_timeout_s}")
    if c.on_data_loss not in ON_DATA_LOSS:
        problems.append(f"on_data_loss must be one of {', '.join(ON_DATA_LOSS)}, got "
                        f"{c.on_data_loss!r}")
    if c.identity.role not in ROLES:
        problems.append(f"role must be one of {', '.join(ROLES)}, got {c.identity.role!r}")
    if c.identity.standby not in STANDBYS:
        problems.append(f"standby must be one of {', '.join(STANDBYS)}, got "
                        f"{c.identity.standby!r}")
    if t.beat_interval_s < 0:
        problems.append(f"beat_interval_s must be >= 0 (0: no beats), got {t.beat_interval_s}")
    if t.max_runtime_s < 0:
        problems.append(f"max_runtime_s must be >= 0, got {t.max_runtime_s}")
    if not 0 <= c.endpoint.metrics_port <= 65535:
        problems.append(f"metrics_port must be 0 (off) or a TCP port, got "
                        f"{c.endpoint.metrics_port}")
    named = {"metrics_topic": c.topics.metrics_topic, "control_topic": c.topics.control_topic,
             "ack_topic": c.topics.ack_topic, "state_topic": c.topics.state_topic,
             "bootstrap_servers": c.bootstrap_servers, "metrics_host": c.endpoint.metrics_host}
    problems += [f"{name} must not be empty" for name, v in named.items() if not v.strip()]
    if c.topics.input_topic and c.topics.input_topic == c.topics.output_topic:
        problems.append(f"input_topic and output_topic are both {c.topics.input_topic!r}")
    return problems


def _knob_problems(c: JobConfig) -> list[str]:
    """The knobs' starting values, checked by the registry as a control tuple's would be (the
    function version waits for the job's declaration, `bind`)."""
    return start_problems(c.initial_state(), c.limits(), frozenset({UDF_VERSION}))


MIN_RECORD_BYTES = 4096
"""Below this a dead letter's headers (origin, reason, size) would leave no room for its
payload."""
_STANDALONE_MASTER = re.compile(r"spark://[^\s:/,]+:\d{1,5}(,[^\s:/,]+:\d{1,5})*")
MIN_EXECUTOR_MEMORY_MB = 450
"""Spark refuses smaller executors (1.5 x its 300 MiB reserved memory)."""


def _cluster_problems(c: JobConfig) -> list[str]:
    s = c.spark
    problems = []
    if s.spark_master and not _STANDALONE_MASTER.fullmatch(s.spark_master):
        problems.append(
            f"spark_master must be empty (local mode, local[task_slots]) or a Spark standalone "
            f"master spark://host:port[,host:port], got {s.spark_master!r}; for local mode set "
            "task_slots instead, and Kubernetes or YARN need settings this job does not have")
    if s.executor_memory_mb < MIN_EXECUTOR_MEMORY_MB:
        problems.append(f"executor_memory_mb must be >= {MIN_EXECUTOR_MEMORY_MB} (Spark's "
                        f"minimum), got {s.executor_memory_mb}")
    return problems
