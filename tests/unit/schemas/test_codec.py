"""The wire contract: round trips, the framing, evolution, and one typed error for garbage."""

from __future__ import annotations

import copy
import json
import struct
from importlib import resources

import pytest
from fastavro.schema import fingerprint
from hypothesis import given
from hypothesis import strategies as st

from schemas import (
    Ack,
    ControlTuple,
    Decision,
    DecodeError,
    KnobSetting,
    Outcome,
    Role,
    SensorReading,
    SensorWindowAverage,
    SourcePartition,
    TaskMetrics,
    codec_for,
    single_object,
)
from schemas.codec import ALL_RECORD_TYPES, MAGIC, Codec

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
# Timestamps stay in the range a datetime can hold, as they do on the wire.
millis = st.integers(min_value=0, max_value=253_402_300_799_000)
text = st.text(max_size=20)
doubles = st.floats(allow_nan=False)

partitions = st.builds(SourcePartition, text, ints, longs, longs, longs)
task_metrics = st.builds(
    TaskMetrics, text, text, st.sampled_from(Role), longs, longs, millis, millis, longs, longs,
    longs, longs, st.lists(partitions, max_size=4).map(tuple), ints, ints, ints, longs, longs,
    longs, st.lists(text, max_size=3).map(tuple), st.lists(text, max_size=3).map(tuple),
    longs, running_partitions=st.lists(partitions, max_size=3).map(tuple),
    lost_ranges=st.lists(partitions, max_size=3).map(tuple),
)
settings = st.builds(KnobSetting, text, text)
control_tuples = st.builds(
    ControlTuple, text, text, text, text, text, longs, text, text, millis,
    st.lists(settings, max_size=3).map(tuple), st.none() | st.binary(max_size=32),
)
acks = st.builds(Ack, text, text, text, longs, st.sampled_from(Outcome), text, longs, millis)
decisions = st.builds(
    Decision, text, text, millis, text, text, text, text, text,
    st.dictionaries(text, doubles, max_size=4), st.none() | text, st.booleans(),
)
readings = st.builds(SensorReading, text, millis, doubles, longs)
averages = st.builds(SensorWindowAverage, text, text, millis, millis, longs, doubles, doubles,
                     doubles, longs)


@pytest.mark.parametrize(
    "strategy", [task_metrics, control_tuples, acks, decisions, readings, averages]
)
def test_every_record_round_trips(strategy: st.SearchStrategy) -> None:
    @given(strategy)
    def check(record: object) -> None:
        codec = codec_for(type(record))  # type: ignore[arg-type]
        assert codec.decode(codec.encode(record)) == record  # type: ignore[arg-type]

    check()


def test_framing_is_avro_single_object_encoding() -> None:
    # The Avro test suite's fingerprint of the schema "null" (Java's parsingFingerprint64).
    assert bytes.fromhex(fingerprint('"null"', "CRC-64-AVRO")) == struct.pack(
        "<q", 7195948357588979594
    )
    reading = SensorReading("s-1", 1_700_000_000_000, 21.5, 7)
    payload = codec_for(SensorReading).encode(reading)
    assert payload[:2] == MAGIC
    assert payload[2:10] == codec_for(SensorReading).fingerprint


def test_every_avsc_file_is_used_by_exactly_one_record_type() -> None:
    names = set()
    for entry in resources.files("schemas").joinpath("avro").iterdir():
        raw = json.loads(entry.read_text())
        names.add(f"{raw['namespace']}.{raw['name']}")
    assert names == {t.AVRO_NAME for t in ALL_RECORD_TYPES}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (None, "empty payload"),
        (b"", "not Avro single-object encoded: the payload is empty"),
        (b"\x00\x01garbage-bytes", "not Avro single-object encoded: it starts with 00 01"),
        (b'{"control_id": "x"}', "looks like JSON text"),
        (MAGIC + b"\x00" * 8 + b"\x02", "written with an unknown schema: fingerprint "
                                         "0000000000000000"),
    ],
)
def test_garbage_raises_one_typed_error_with_its_position(payload: bytes | None,
                                                          reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        codec_for(Ack).decode(payload, topic="streamctl.acks", partition=0, offset=42)
    err = info.value
    assert reason in str(err)
    assert (err.topic, err.partition, err.offset) == ("streamctl.acks", 0, 42)
    assert "topic=streamctl.acks, partition=0, offset=42" in str(err)


def test_truncated_and_padded_bodies_are_decode_errors_in_words() -> None:
    codec = codec_for(SensorReading)
    good = codec.encode(SensorReading("s-1", 1, 1.0, 1))
    with pytest.raises(DecodeError) as truncated:
        codec.decode(good[:-3])
    assert truncated.value.reason == ("truncated: the Avro body ends (11 bytes) before a "
                                      "whole SensorReading was read")
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(good + b"\x00")


def test_a_record_of_another_type_is_rejected() -> None:
    payload = codec_for(SensorReading).encode(SensorReading("s-1", 1, 1.0, 1))
    with pytest.raises(DecodeError, match="written with an unknown schema"):
        codec_for(Ack).decode(payload)


def test_an_older_writer_schema_is_resolved_against_the_current_one() -> None:
    """Evolution: a writer without a defaulted field is read with the field's default."""
    old_schema = copy.deepcopy(json.loads(
        resources.files("schemas").joinpath("avro/task_metrics.avsc").read_text()))
    old_schema["fields"] = [f for f in old_schema["fields"] if f["name"] != "state_bytes"]
    old_writer = Codec(TaskMetrics, schema=old_schema)
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, (), 2, 4, 8,
                          state_rows=9, state_bytes=123)
    payload = old_writer.encode(metrics)

    reader = Codec(TaskMetrics)
    with pytest.raises(DecodeError, match="written with an unknown schema"):
        reader.decode(payload)
    reader.register_writer_schema(old_schema)
    decoded = reader.decode(payload)
    assert decoded.state_bytes == 0  # the default, not the value the old writer could not carry
    assert decoded.state_rows == 9


def test_records_of_the_previous_task_metrics_schema_still_decode() -> None:
    """v1 (before max_offsets_per_trigger) is shipped in schemas/history and resolved with
    the field's default, so a controller upgraded before its jobs still reads their metrics."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/task_metrics.1.avsc").read_text())
    assert "max_offsets_per_trigger" not in {f["name"] for f in old_schema["fields"]}
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, (), 2, 4, 8,
                          sink_topics=("out",), max_offsets_per_trigger=4000)
    payload = Codec(TaskMetrics, schema=old_schema).encode(metrics)
    decoded = codec_for(TaskMetrics).decode(payload)
    assert decoded.max_offsets_per_trigger == 0  # unknown: the default
    assert decoded.sink_topics == ("out",) and decoded.task_slots == 8
    current = codec_for(TaskMetrics).encode(metrics)
    assert codec_for(TaskMetrics).decode(current).max_offsets_per_trigger == 4000


def test_records_of_task_metrics_v2_decode_with_no_rows_shed() -> None:
    """v2 (before rows_shed) is shipped in schemas/history; its records read as 0 rows shed."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/task_metrics.2.avsc").read_text())
    assert "rows_shed" not in {f["name"] for f in old_schema["fields"]}
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, (), 2, 4, 8,
                          max_offsets_per_trigger=4000, rows_shed=12)
    decoded = codec_for(TaskMetrics).decode(Codec(TaskMetrics, schema=old_schema).encode(metrics))
    assert (decoded.rows_shed, decoded.max_offsets_per_trigger) == (0, 4000)
    current = codec_for(TaskMetrics).encode(metrics)
    assert codec_for(TaskMetrics).decode(current).rows_shed == 12


def test_records_of_task_metrics_v3_decode_as_sized_by_input_parallelism_in_local_mode(
        ) -> None:
    """v3 (before the scaling parameter and the executor bounds) is shipped in
    schemas/history; its records read as a local-mode job scaled by its input parallelism,
    which is what every job was when they were written."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/task_metrics.3.avsc").read_text())
    assert "scaling_parameter" not in {f["name"] for f in old_schema["fields"]}
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, (), 2, 4, 8,
                          rows_shed=12, scaling_parameter="state_partitions",
                          max_state_partitions=32, executor_cores=2, max_executors=4)
    decoded = codec_for(TaskMetrics).decode(Codec(TaskMetrics, schema=old_schema).encode(metrics))
    assert (decoded.scaling_parameter, decoded.max_state_partitions, decoded.executor_cores,
            decoded.max_executors, decoded.rows_shed) == ("input_parallelism", 0, 0, 0, 12)
    current = codec_for(TaskMetrics).decode(codec_for(TaskMetrics).encode(metrics))
    assert current == metrics


def test_records_of_task_metrics_v4_decode_as_an_instance_that_sends_no_beats() -> None:
    """v4 (before liveness beats) is shipped in schemas/history; its records read as batches
    or heartbeats of an instance that sends no beats, so the controller judges it by its
    batches as before."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/task_metrics.4.avsc").read_text())
    assert "beat" not in {f["name"] for f in old_schema["fields"]}
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, -1, 3, 3, 1000, 0, 0, 0, (), 2, 4, 8,
                          beat_interval_ms=1000, beat=True, running_batch_id=7,
                          running_since_ms=2,
                          running_partitions=(SourcePartition("in", 0, 10, 50, 50),))
    decoded = codec_for(TaskMetrics).decode(Codec(TaskMetrics, schema=old_schema).encode(metrics))
    assert (decoded.beat_interval_ms, decoded.beat, decoded.running_batch_id,
            decoded.running_since_ms, decoded.running_partitions) == (0, False, -1, 0, ())
    current = codec_for(TaskMetrics).decode(codec_for(TaskMetrics).encode(metrics))
    assert current == metrics


def test_a_dict_from_before_a_defaulted_field_gets_the_default() -> None:
    """Recorded traces hold `to_avro()` dicts; one written before a field existed still reads."""
    data = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, (), 2, 4, 8).to_avro()
    del data["max_offsets_per_trigger"]
    assert TaskMetrics.from_avro(data).max_offsets_per_trigger == 0


def test_records_of_task_metrics_v5_decode_as_a_running_instance_with_nothing_lost() -> None:
    """v5 (before the metrics address, the stop and the data-loss fields) is shipped in
    schemas/history; its records read as an instance that runs, serves no address it told,
    and found nothing deleted."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/task_metrics.5.avsc").read_text())
    assert "lost_ranges" not in {f["name"] for f in old_schema["fields"]}
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, -1, 3, 3, 1000, 0, 0, 0, (), 2, 4, 8,
                          metrics_address="host:9302", stopped=True, halted="input lost",
                          lost_ranges=(SourcePartition("in", 0, 10, 50, 90),))
    decoded = codec_for(TaskMetrics).decode(Codec(TaskMetrics, schema=old_schema).encode(metrics))
    assert (decoded.metrics_address, decoded.stopped, decoded.halted, decoded.lost_ranges) == (
        "", False, "", ())
    current = codec_for(TaskMetrics).decode(codec_for(TaskMetrics).encode(metrics))
    assert current == metrics


@pytest.mark.parametrize("version", [6, 7])
def test_records_of_task_metrics_v6_and_v7_decode_as_a_job_that_sheds_nothing(
        version: int) -> None:
    """v6 (before the stated objectives) and v7 (before the shedding figures) are shipped in
    schemas/history; their records read as a job that states no objective (v6) and marks no
    record low priority, so the controller never sheds it."""
    old_schema = json.loads(
        resources.files("schemas").joinpath(f"history/task_metrics.{version}.avsc").read_text())
    assert "rows_low_priority" not in {f["name"] for f in old_schema["fields"]}
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, (), 2, 4, 8,
                          rows_shed=3, max_delay_ms=30_000, rows_low_priority=4,
                          shed_fraction=0.25, max_shed_fraction=0.5)
    decoded = codec_for(TaskMetrics).decode(Codec(TaskMetrics, schema=old_schema).encode(metrics))
    assert (decoded.rows_low_priority, decoded.shed_fraction, decoded.max_shed_fraction,
            decoded.rows_shed) == (0, 0.0, 0.0, 3)
    assert decoded.max_delay_ms == (0 if version == 6 else 30_000)
    current = codec_for(TaskMetrics).decode(codec_for(TaskMetrics).encode(metrics))
    assert current == metrics


def test_records_of_task_metrics_v8_decode_as_a_job_whose_batch_cap_stays_as_it_is() -> None:
    """v8 (before max_batch_cap) is shipped in schemas/history; its records read as a job that
    reports no batch cap limit, whose cap the controller therefore never changes."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/task_metrics.8.avsc").read_text())
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, (), 2, 4, 8,
                          max_offsets_per_trigger=1500, max_batch_cap=100_000)
    decoded = codec_for(TaskMetrics).decode(Codec(TaskMetrics, schema=old_schema).encode(metrics))
    assert (decoded.max_offsets_per_trigger, decoded.max_batch_cap) == (1500, 0)


def test_control_tuples_of_v1_decode_as_setting_one_knob() -> None:
    """control_tuple v1 (before `together`) is shipped in schemas/history; its tuples read as
    setting their one knob."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/control_tuple.1.avsc").read_text())
    sent = ControlTuple("c", "q", "source", "input_parallelism", "4", 3, "controller", "why",
                        1_700_000_000_000)
    decoded = codec_for(ControlTuple).decode(Codec(ControlTuple, schema=old_schema).encode(sent))
    assert decoded == sent
    assert decoded.settings == (KnobSetting("input_parallelism", "4"),)


def test_a_source_partition_decodes_every_field_its_schema_has() -> None:
    """`SourcePartition.from_avro` names its fields itself (the record decoded most): one added
    to the schema and the class must be added there too, or it would decode as its default."""
    metrics = codec_for(TaskMetrics).schema
    [partitions] = [f for f in metrics["fields"] if f["name"] == "partitions"]
    names = [f["name"] for f in partitions["type"]["items"]["fields"]]
    wire = {name: "t" if name == "topic" else 10 + i for i, name in enumerate(names)}
    assert SourcePartition.from_avro(wire).to_avro() == wire


LISTS = {"partitions": (SourcePartition("in", 0, 10, 50, 90), SourcePartition("in", 1, 7, 7, 7)),
         "running_partitions": (SourcePartition("in", 0, 50, 80, 80),),
         "lost_ranges": (SourcePartition("in", 1, 3, 7, 9),)}


def test_records_of_task_metrics_v10_decode_with_the_partitions_they_list() -> None:
    """v10 (before the packed offsets) is shipped in schemas/history; its lists of partitions
    read as they were written."""
    old_schema = json.loads(
        resources.files("schemas").joinpath("history/task_metrics.10.avsc").read_text())
    assert "source_offsets" not in {f["name"] for f in old_schema["fields"]}
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, **LISTS,
                          input_parallelism=2, state_partitions=4, task_slots=8)
    decoded = codec_for(TaskMetrics).decode(Codec(TaskMetrics, schema=old_schema).encode(metrics))
    assert decoded == metrics


def test_a_thousand_partitions_of_one_topic_name_it_once_at_a_dozen_bytes_each() -> None:
    """The wire packs a batch's partitions by topic, the ends and latest offsets as
    differences: ten-digit offsets cost what a batch read, not ten digits each."""
    topic = "payments.card-transactions"
    partitions = tuple(SourcePartition(topic, p, 7_000_000_000 + p, 7_000_000_400 + p,
                                       7_000_000_450 + p) for p in range(1000))
    metrics = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, partitions, 2, 4, 8)
    payload = codec_for(TaskMetrics).encode(metrics)
    assert payload.count(topic.encode()) == 1
    assert len(payload) < 12 * len(partitions)
    assert codec_for(TaskMetrics).decode(payload) == metrics


def test_packed_offsets_of_unequal_lengths_are_a_decode_error_naming_the_topic() -> None:
    codec = codec_for(TaskMetrics)
    wire = TaskMetrics("q", "i", Role.ACTIVE, 1, 2, 3, 4, 1000, 5, 6, 7, **LISTS,
                       input_parallelism=2, state_partitions=4, task_slots=8).to_wire()
    wire["source_offsets"][0]["end_deltas"].pop()
    payload = single_object.frame(codec.fingerprint, single_object.write_body(codec.schema, wire))
    with pytest.raises(DecodeError, match="the offsets of topic 'in' list 2 partitions, 2 "
                                          "starts, 1 ends and 2 latest offsets"):
        codec.decode(payload, topic="metrics", partition=0, offset=5)
