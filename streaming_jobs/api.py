"""The public job API: what you write to put your own PySpark query under streamctl's control.

    from streaming_jobs.api import Job, Json, Topics

    def build(spark, clicks, context):
        return clicks.where("page is not null")

    job = Job(name="clean-clicks", build=build,
              input=Json("user_id string not null, page string, ts long"),
              output=Json(key="user_id"),
              topics=Topics(input="clicks", output="clean-clicks"))

Run it with `streamctl job run --job mypackage.clicks:job`, or register it under the
`streamctl.jobs` entry-point group of your package and run it by name. This is the one module
of `streaming_jobs` a job imports; everything else is the runtime's.

**The contract.** The runtime owns the Kafka source (topics, offsets, `minPartitions`, the
batch cap, switching the input topic), decoding the input in its declared format (a record that
does not decode goes to the dead-letter topic, with its position and the reason in words, and
is counted), load shedding (of the records `low_priority` marks), the exactly-once
transactional sink, the checkpoint, metrics and every reconfiguration. The job owns `build`:
from the decoded rows (one column per field of the input format) to the rows it writes,
which the output format encodes. A job is safe to reconfigure at any batch boundary when
`build` is deterministic for a batch (the same input rows give the same output rows, so a
replayed batch writes the same records) and its state keeps one schema (raise `state_version`
when it changes: the checkpoint then refuses the new plan instead of misreading old state).

Declaration errors (`JobDefinitionError`) name the job and what is wrong, at import time;
`build` is called and its columns checked against the output format when the job is loaded,
before Spark runs a batch. Guide: docs/writing-jobs.md.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from schemas.knobs import INPUT_PARALLELISM, SCALING, STATE_PARTITIONS
from schemas.objectives import NONE, Objectives
from streaming_jobs.errors import UserError
from streaming_jobs.formats import Avro, InputFormat, Json, KeyValue, OutputFormat
from streaming_jobs.formats.ddl import DdlError
from streaming_jobs.per_batch import SwappableFunction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "INPUT_PARALLELISM", "STATE_PARTITIONS", "Avro", "Builder", "Job",
    "JobContext", "JobDefinitionError", "Json", "KeyValue", "Objectives", "Setting",
    "SwappableFunction", "Topics",
]

OUTPUT_MODES = ("append", "update", "complete")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SETTING = re.compile(r"[a-z][a-z0-9_]{0,63}")


class JobDefinitionError(UserError):
    """A job declared wrongly; the message names the job and what to change."""


@dataclass(frozen=True)
class JobContext:
    """What `build` knows of the run it builds: the knobs in force and its own settings."""

    query_id: str
    input_parallelism: int
    state_partitions: int
    max_offsets_per_trigger: int
    udf_version: str
    """The version of the job's swappable function in force when the plan was built ('' when
    it declares none). It changes without a rebuild: read `function.version` where the
    function runs, not this, to label output with the version that made it."""
    function: SwappableFunction | None
    """The job's function (None when it declares none). Call it from your Spark functions
    (it is pickled with them): each call goes to the version in force for the batch it runs
    in, so a `udf_version` change takes effect at the next batch without a restart."""
    settings: Mapping[str, Any]
    """The job's own settings (`Job.settings`), as given with `--set name=value` or
    `STREAMCTL_<NAME>`, else their defaults."""


class Builder(Protocol):
    """(spark, source, context) → the output rows; any parameter names."""

    def __call__(self, spark: SparkSession, source: DataFrame, context: JobContext, /
                 ) -> DataFrame: ...


@dataclass(frozen=True)
class Topics:
    """The job's default topics; `job run` options override them."""

    input: str
    output: str
    dead_letters: str = ""
    """Undecodable input goes here; default `<input>.dlq`."""

    def resolved_dead_letters(self) -> str:
        return self.dead_letters or f"{self.input}.dlq"


@dataclass(frozen=True)
class Setting:
    """One of the job's own options: a name (lower_case), a default whose type (int, float,
    str or bool) is the setting's, and a line of help."""

    name: str
    default: int | float | str | bool
    help: str = ""

    def parse(self, text: str) -> int | float | str | bool:
        """The value from its text, or ValueError saying what is expected."""
        kind = type(self.default)
        if kind is bool:
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(f"expected true or false, got {text!r}")
            return lowered in ("true", "1", "yes")
        try:
            return kind(text.strip()) if kind is not str else text
        except ValueError:
            raise ValueError(f"expected {'an integer' if kind is int else 'a number'}, "
                             f"got {text!r}") from None


@dataclass(frozen=True)
class Job:
    """One elastic job. Only `name`, `build`, `input` and `topics` are required."""

    name: str
    build: Builder
    """(spark, source, context) → the output rows. `source` is the decoded input: one
    column per field of `input` (plus `kafka_*` columns with `kafka_metadata`)."""
    input: InputFormat
    topics: Topics
    output: OutputFormat = field(default_factory=KeyValue)
    """How output rows become Kafka records; the default takes `key`/`value` columns as is."""
    description: str = ""
    output_mode: str = "append"
    stateful: bool = False
    """Keeps state in the checkpoint (aggregations, `applyInPandasWithState`, …): its state
    partitions can then be changed (repartitioned offline, RocksDB state store)."""
    scales_with: str = INPUT_PARALLELISM
    """Which knob the job's capacity grows with: `input_parallelism` when its expensive work
    runs in the source's tasks, `state_partitions` when it runs in the stateful operator."""
    functions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    """Named versions of the job's swappable function; a `udf_version` tuple picks one."""
    default_function: str = ""
    """The version a new run starts with; default the first of `functions`."""
    settings: Sequence[Setting] = ()
    low_priority: Callable[[Mapping[str, Any], Mapping[str, Any]], bool] | None = None
    """(decoded record, settings) → whether load shedding may drop it. None: the job cannot
    be shed (a `shed_fraction` tuple is refused)."""
    state_version: int = 1
    """Raise it when the state's schema changes: an older checkpoint is then refused."""
    kafka_metadata: bool = False
    """Add `kafka_key`, `kafka_topic`, `kafka_partition`, `kafka_offset`, `kafka_timestamp`
    columns to the source rows."""
    objectives: Objectives = NONE
    """What the job needs, instead of utilisation numbers: `Objectives(max_delay_s=30)` (a
    record waits at most 30 s before its batch commits), `drain_within_s` (a backlog is gone
    within that many seconds). The controller sizes for the fewest units that meet them, names
    the one that drove a decision, and exports whether each is met. `--max-delay-s` and
    `--drain-within-s` override them at `job run`."""

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise JobDefinitionError(f"job {self.name!r}: " + "; ".join(problems))

    @property
    def initial_udf_version(self) -> str:
        """The version a new run starts with ('' when the job has no functions)."""
        return self.default_function or next(iter(self.functions), "")

    def setting(self, name: str) -> Setting:
        for s in self.settings:
            if s.name == name:
                return s
        raise KeyError(name)


def _problems(job: Job) -> list[str]:
    problems = []
    if not isinstance(job.name, str) or not _NAME.fullmatch(job.name):
        problems.append("the name must be 1-100 of [A-Za-z0-9._-], starting with a letter or "
                        "digit")
    problems += _builder_problems(job.build)
    if not isinstance(job.input, InputFormat):
        problems.append(f"input must be a format (Json(…), Avro(…)), got {job.input!r}")
    elif isinstance(job.input, Json):
        try:
            job.input.fields()
        except (ValueError, DdlError) as exc:
            problems.append(f"input: {exc}")
    if not isinstance(job.output, OutputFormat):
        problems.append(f"output must be a format (Json(…), Avro(…), KeyValue()), got "
                        f"{job.output!r}")
    problems += _topic_problems(job.topics)
    if not isinstance(job.objectives, Objectives):
        problems.append(f"objectives must be Objectives(…), got {job.objectives!r}")
    else:
        problems += [f"objectives: {p}" for p in job.objectives.problems(0.0)]
    if job.output_mode not in OUTPUT_MODES:
        problems.append(f"output_mode must be one of {', '.join(OUTPUT_MODES)}, got "
                        f"{job.output_mode!r}")
    if job.scales_with not in SCALING:
        problems.append(f"scales_with names an unknown knob {job.scales_with!r}; a job's "
                        f"capacity grows with one of {', '.join(SCALING)}")
    elif job.scales_with == STATE_PARTITIONS and not job.stateful:
        problems.append("scales_with='state_partitions' needs stateful=True: a stateless job "
                        "has no state partitions")
    problems += _function_problems(job)
    problems += _setting_problems(job.settings)
    if job.low_priority is not None and not callable(job.low_priority):
        problems.append("low_priority must be a function (record, settings) -> bool")
    if not isinstance(job.state_version, int) or job.state_version < 1:
        problems.append(f"state_version must be a positive integer, got {job.state_version!r}")
    return problems


def _builder_problems(build: Any) -> list[str]:
    if build is None:
        return ["it has no builder: pass build=(spark, source, context) -> DataFrame"]
    if not callable(build):
        return [f"build must be a function (spark, source, context) -> DataFrame, got "
                f"{type(build).__name__}"]
    try:
        inspect.signature(build).bind(None, None, None)
    except TypeError:
        return [f"build must take (spark, source, context); "
                f"{getattr(build, '__name__', 'it')}{inspect.signature(build)} does not"]
    except ValueError:  # a builtin without a signature: trust it
        pass
    return []


def _topic_problems(topics: Any) -> list[str]:
    if not isinstance(topics, Topics):
        return [f"topics must be Topics(input=…, output=…), got {topics!r}"]
    problems = [f"topics.{name}: {value!r} is not a Kafka topic name (1-249 of [A-Za-z0-9._-])"
                for name, value in (("input", topics.input), ("output", topics.output),
                                    ("dead_letters", topics.resolved_dead_letters()))
                if not isinstance(value, str) or not _TOPIC.fullmatch(value)]
    if topics.input == topics.output:
        problems.append(f"the input and output topics are both {topics.input!r}")
    return problems


def _function_problems(job: Job) -> list[str]:
    problems = []
    for name, function in job.functions.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append(f"function version {name!r} must be 1-100 of [A-Za-z0-9._-]")
        if not callable(function):
            problems.append(f"function version {name!r} is not callable")
    if job.default_function and job.default_function not in job.functions:
        problems.append(f"default_function {job.default_function!r} is not one of the "
                        f"versions: {', '.join(job.functions) or 'none declared'}")
    return problems


def _setting_problems(settings: Sequence[Setting]) -> list[str]:
    problems = []
    names = [s.name for s in settings if isinstance(s, Setting)]
    for s in settings:
        if not isinstance(s, Setting):
            problems.append(f"settings must be Setting(name, default, help), got {s!r}")
        elif not _SETTING.fullmatch(s.name):
            problems.append(f"setting {s.name!r}: a name is lower_case letters, digits and _")
        elif type(s.default) not in (int, float, str, bool):
            problems.append(f"setting {s.name!r}: the default must be an int, float, str or "
                            f"bool, got {type(s.default).__name__}")
        elif s.name in _reserved():
            problems.append(f"setting {s.name!r} has the name of a runtime option; rename it")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    problems += [f"setting {n!r} is declared more than once" for n in duplicates]
    return problems


def _reserved() -> frozenset[str]:
    from streaming_jobs.config import flat_fields  # the runtime's options (no pyspark)

    return frozenset(f.name for f in flat_fields())
