"""In-process mirrors of the wire records in `schemas/avro/`.

Every record is a frozen dataclass with plain Python types (ints for timestamps in epoch
milliseconds, tuples for arrays, `StrEnum` for Avro enums). Conversion to and from the
Avro dict form happens only in `to_avro` / `from_avro`, which the codec calls at the edge
(writing `to_wire`: the dict form, with `TaskMetrics`' lists of partitions packed; `from_avro`
reads both forms). Nothing else in the project sees Avro dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import groupby
from operator import attrgetter
from typing import Any, ClassVar, Self

from schemas import knobs

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(value: int | datetime) -> int:
    """Avro `timestamp-millis` comes back from fastavro as an aware datetime; we keep ints."""
    if isinstance(value, datetime):
        return (value - _EPOCH) // timedelta(milliseconds=1)
    return int(value)


class Role(StrEnum):
    ACTIVE = "ACTIVE"
    STANDBY = "STANDBY"


class Outcome(StrEnum):
    APPLIED = "APPLIED"
    REJECTED = "REJECTED"
    FAILED = "FAILED"


class _Record:
    """Shared edge conversion; subclasses name their Avro schema and fix up nested fields."""

    AVRO_NAME: ClassVar[str]
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset()

    def to_avro(self) -> dict[str, Any]:
        return {name: _plain(getattr(self, name)) for name, _ in _fields_of(type(self))}

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> Self:
        kwargs = {}
        for name, optional in _fields_of(cls):
            if optional and name not in data:
                # A dict written before the field existed (e.g. a recorded trace): the Avro
                # default applies, as it does when the codec resolves an older writer schema.
                continue
            value = data[name]
            if name in cls._TIMESTAMP_FIELDS:
                value = epoch_ms(value)
            kwargs[name] = value
        return cls(**cls._convert_nested(kwargs))

    @classmethod
    def _convert_nested(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        return kwargs

    def to_wire(self) -> dict[str, Any]:
        """What the codec writes: the dict form, unless the record packs a field tighter
        (`from_avro` reads both)."""
        return self.to_avro()


def _fields_of(record: type[_Record]) -> tuple[tuple[str, bool], ...]:
    """Each field's name and whether it has a default, once per class: a metrics record
    carries a record per source partition, and `dataclasses.fields` per record was most of
    what decoding a heartbeat of a thousand partitions cost."""
    found = _FIELDS.get(record)
    if found is None:
        found = _FIELDS[record] = tuple((f.name, f.default is not MISSING)
                                        for f in fields(record))  # type: ignore[arg-type]
    return found


_FIELDS: dict[type[_Record], tuple[tuple[str, bool], ...]] = {}


def _plain(value: Any) -> Any:
    if isinstance(value, _Record):
        return value.to_avro()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, StrEnum):
        return value.value
    return value


@dataclass(frozen=True, slots=True)
class SourcePartition(_Record):
    """Offsets of one Kafka partition as seen by one batch."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.SourcePartition"

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    latest_offset: int

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> Self:
        # The record decoded most (one per source partition in every metrics record), and
        # it has no timestamp, default or nested record for the general path to handle.
        return cls(data["topic"], data["partition"], data["start_offset"], data["end_offset"],
                   data["latest_offset"])


_LONG = 2**63


def _wrapped(value: int) -> int:
    """`value` as a signed 64-bit Avro long (two's complement): a difference of two offsets
    then fits, so any pair round-trips; real offsets never come near the edge."""
    return value if -_LONG <= value < _LONG else (value + _LONG) % (2 * _LONG) - _LONG


def _pack_offsets(partitions: tuple[SourcePartition, ...]) -> list[dict[str, Any]]:
    """Partitions as the wire's `TopicOffsets`: each run of one topic's partitions names its
    topic once, and carries each partition's end offset as its distance from its start and
    its latest offset as its distance from its end (a batch's few hundred records, not a
    ten-digit offset). Order is kept."""
    packed = []
    for topic, run in groupby(partitions, key=attrgetter("topic")):
        of_topic = list(run)
        packed.append({
            "topic": topic,
            "partitions": [p.partition for p in of_topic],
            "start_offsets": [p.start_offset for p in of_topic],
            "end_deltas": [_wrapped(p.end_offset - p.start_offset) for p in of_topic],
            "latest_deltas": [_wrapped(p.latest_offset - p.end_offset) for p in of_topic],
        })
    return packed


def _unpack_offsets(packed: list[dict[str, Any]]) -> tuple[SourcePartition, ...]:
    """`_pack_offsets`' inverse; `ValueError` naming the topic when its lists differ in
    length."""
    found = []
    for run in packed:
        topic, columns = run["topic"], (run["partitions"], run["start_offsets"],
                                        run["end_deltas"], run["latest_deltas"])
        if len({len(column) for column in columns}) != 1:
            raise ValueError(f"the offsets of topic {topic!r} list {len(columns[0])} "
                             f"partitions, {len(columns[1])} starts, {len(columns[2])} ends "
                             f"and {len(columns[3])} latest offsets")
        for partition, start, end_delta, latest_delta in zip(*columns, strict=True):
            end = _wrapped(start + end_delta)
            found.append(SourcePartition(topic, partition, start, end,
                                         _wrapped(end + latest_delta)))
    return tuple(found)


_PACKED = {"partitions": "source_offsets", "running_partitions": "running_offsets",
           "lost_ranges": "lost_offsets"}
"""`TaskMetrics`' lists of partitions and the wire fields that carry each packed."""


def _partitions(value: tuple[SourcePartition, ...] | list[dict[str, Any]]
                ) -> tuple[SourcePartition, ...]:
    """A list of partitions of the dict form; one unpacked already is kept."""
    if isinstance(value, tuple):
        return value
    return tuple(SourcePartition.from_avro(p) for p in value)


@dataclass(frozen=True, slots=True)
class TaskMetrics(_Record):
    """One query instance's measurements over one micro-batch, an idle heartbeat (batch_id
    -1), or a liveness beat (`beat`: no rates and no partitions read, only what the query is
    running: `running_*`)."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.TaskMetrics"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"batch_start_ms", "batch_end_ms"})

    query_id: str
    instance_id: str
    role: Role
    config_epoch: int
    batch_id: int
    batch_start_ms: int
    batch_end_ms: int
    trigger_interval_ms: int
    input_rows: int
    output_rows: int
    busy_ms: int
    partitions: tuple[SourcePartition, ...]
    input_parallelism: int
    state_partitions: int
    task_slots: int
    state_rows: int = 0
    state_bytes: int = 0
    rows_dropped_by_watermark: int = 0
    source_topics: tuple[str, ...] = ()
    sink_topics: tuple[str, ...] = ()
    max_offsets_per_trigger: int = 0
    rows_shed: int = 0
    scaling_parameter: str = knobs.INPUT_PARALLELISM
    max_state_partitions: int = 0
    executor_cores: int = 0
    max_executors: int = 0
    beat_interval_ms: int = 0
    beat: bool = False
    running_batch_id: int = -1
    running_since_ms: int = 0
    running_partitions: tuple[SourcePartition, ...] = ()
    metrics_address: str = ""
    stopped: bool = False
    halted: str = ""
    lost_ranges: tuple[SourcePartition, ...] = ()
    max_delay_ms: int = 0
    drain_within_ms: int = 0
    rows_low_priority: int = 0
    shed_fraction: float = 0.0
    max_shed_fraction: float = 0.0
    max_batch_cap: int = 0
    cluster_priority: int = 0

    @classmethod
    def _convert_nested(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs["role"] = Role(kwargs["role"])
        for name in _PACKED:
            kwargs[name] = _partitions(kwargs.get(name, ()))
        kwargs["source_topics"] = tuple(kwargs["source_topics"])
        kwargs["sink_topics"] = tuple(kwargs["sink_topics"])
        return kwargs

    @classmethod
    def from_avro(cls, data: dict[str, Any]) -> Self:
        """The dict form, its lists of partitions as lists or packed (`to_wire`): whichever
        has entries."""
        packed = {name: _unpack_offsets(data[packed_name])
                  for name, packed_name in _PACKED.items() if data.get(packed_name)}
        return super(TaskMetrics, cls).from_avro({**data, **packed} if packed else data)

    def to_wire(self) -> dict[str, Any]:
        """The dict form with every list of partitions packed (`_pack_offsets`): at a
        thousand partitions, a dozen bytes each instead of forty."""
        data = {name: _plain(getattr(self, name)) for name, _ in _fields_of(type(self))
                if name not in _PACKED}
        for name, packed_name in _PACKED.items():
            data[name] = []
            data[packed_name] = _pack_offsets(getattr(self, name))
        return data


@dataclass(frozen=True, slots=True)
class KnobSetting(_Record):
    """One knob's new value, set together with a control tuple's own (`ControlTuple.together`)."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.Setting"

    parameter: str
    value: str


@dataclass(frozen=True, slots=True)
class ControlTuple(_Record):
    """Desired state of one knob: <query_id, operator_id, parameter, value> at an epoch, and
    of any knobs `together` with it, applied in one reconfiguration."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.ControlTuple"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"issued_at_ms"})

    control_id: str
    query_id: str
    operator_id: str
    parameter: str
    value: str
    epoch: int
    issuer: str
    reason: str
    issued_at_ms: int
    together: tuple[KnobSetting, ...] = ()
    auth_tag: bytes | None = None

    @property
    def settings(self) -> tuple[KnobSetting, ...]:
        """Every knob the tuple sets: its own first, then those `together` with it."""
        return (KnobSetting(self.parameter, self.value), *self.together)

    def describe(self) -> str:
        """'input_parallelism → 16, max_offsets_per_trigger → 12000'."""
        return ", ".join(f"{s.parameter} → {s.value}" for s in self.settings)

    @classmethod
    def _convert_nested(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs["together"] = tuple(KnobSetting.from_avro(s) for s in kwargs.get("together", ()))
        return kwargs


@dataclass(frozen=True, slots=True)
class Ack(_Record):
    """A job's answer to one control tuple."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.Ack"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"acked_at_ms"})

    control_id: str
    query_id: str
    instance_id: str
    epoch: int
    outcome: Outcome
    detail: str
    pause_ms: int
    acked_at_ms: int

    @classmethod
    def _convert_nested(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs["outcome"] = Outcome(kwargs["outcome"])
        return kwargs


@dataclass(frozen=True, slots=True)
class DesiredStateRecord(_Record):
    """A job's configuration in force, as published to the compacted state topic."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.DesiredState"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"updated_at_ms"})

    query_id: str
    instance_id: str
    epoch: int
    control_id: str | None
    updated_at_ms: int
    input_parallelism: int
    state_partitions: int
    max_offsets_per_trigger: int
    shed_fraction: float
    udf_version: str
    input_topic: str
    output_topic: str
    executors: int
    active_instance: str = ""


@dataclass(frozen=True, slots=True)
class CommitMarker(_Record):
    """The last batch a query's transactional sink committed (same transaction as its rows)."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.SinkCommitMarker"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"committed_at_ms"})

    query_id: str
    checkpoint_id: str
    batch_id: int
    topic: str
    rows: int
    committed_at_ms: int


TAKEOVER = "takeover"
"""The action of the decision a controller instance writes when it starts to lead: its query
id is empty (it concerns every query) and its target value names the instance."""


@dataclass(frozen=True, slots=True)
class Decision(_Record):
    """One decision of the controller, as written to the decision log."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.v1.Decision"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"decided_at_ms"})

    decision_id: str
    query_id: str
    decided_at_ms: int
    action: str
    parameter: str
    current_value: str
    target_value: str
    reason: str
    figures: Mapping[str, float]
    control_id: str | None = None
    dry_run: bool = False

    def to_avro(self) -> dict[str, Any]:
        data = _Record.to_avro(self)
        data["figures"] = dict(self.figures)
        return data


@dataclass(frozen=True, slots=True)
class SensorReading(_Record):
    """Input event of the bundled sensor-averages job."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.sensors.v1.SensorReading"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"event_time_ms"})

    sensor_id: str
    event_time_ms: int
    value: float
    seq: int


@dataclass(frozen=True, slots=True)
class SensorWindowAverage(_Record):
    """One closed event-time window of one sensor (output of the bundled job)."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.sensors.v1.SensorWindowAverage"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"window_start_ms", "window_end_ms"})

    sensor_id: str
    region: str
    window_start_ms: int
    window_end_ms: int
    count: int
    avg_value: float
    min_value: float
    max_value: float
    seq_sum: int


@dataclass(frozen=True, slots=True)
class CardTransaction(_Record):
    """Input event of the bundled fraud-detection job (one card payment of one account)."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.cards.v1.CardTransaction"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"event_time_ms"})

    txn_id: str
    account_id: str
    card_id: str
    account_seq: int
    amount: float
    merchant: str
    country: str
    event_time_ms: int
    channel: str = "online"
    priority: int = 1


@dataclass(frozen=True, slots=True)
class ScoredTransaction(_Record):
    """One scored transaction (output of the fraud-detection job, one per input)."""

    AVRO_NAME: ClassVar[str] = "io.streamctl.cards.v1.ScoredTransaction"
    _TIMESTAMP_FIELDS: ClassVar[frozenset[str]] = frozenset({"event_time_ms"})

    account_id: str
    txn_id: str
    account_seq: int
    event_time_ms: int
    amount: float
    account_txn_count: int
    score: float
    rules_fired: tuple[str, ...]
    alert: bool
    scorer_version: str

    @classmethod
    def _convert_nested(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs["rules_fired"] = tuple(kwargs["rules_fired"])
        return kwargs
