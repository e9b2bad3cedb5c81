"""The sensor job without Spark: the runtime's decode step on its Avro input (dead letters,
shedding of the readings it marks low priority), its enrichment versions, and its Avro output."""

from __future__ import annotations

import pyarrow as pa

from schemas.codec import codec_for
from schemas.records import SensorReading, SensorWindowAverage
from streaming_jobs.api import Avro
from streaming_jobs.jobs.sensor_averages import enrich, job, region_of, subregion_of
from tests.unit.streaming_jobs.jobs.arrow_input import MemoryDeadLetters, decode


def test_good_records_are_decoded_and_garbage_goes_to_dead_letters() -> None:
    good = SensorReading("s-1", 1_700_000_000_000, 21.5, 7)
    dead = MemoryDeadLetters()
    rows = decode(job, [codec_for(SensorReading).encode(good), b"garbage", None], dead=dead)
    assert rows[0] == {"sensor_id": "s-1", "event_time_ms": 1_700_000_000_000, "value": 21.5,
                       "seq": 7, "dead_letter": False, "shed": False, "low_priority": True}
    assert [r["dead_letter"] for r in rows] == [False, True, True]
    assert [(e.topic, e.partition, e.offset) for _, e in dead.sent] == [("in", 1, 41),
                                                                        ("in", 1, 42)]
    assert dead.sent[0][0] == b"garbage"
    assert dead.sent[0][1].reason.startswith("not Avro single-object encoded: it starts with "
                                             "67 61")
    assert dead.flushed


def test_region_lookup_is_deterministic_and_bounded() -> None:
    assert region_of("sensor-9") == region_of("sensor-9")
    assert {region_of(f"s{i}") for i in range(200)} == {"north", "south", "east", "west"}


def test_encoded_averages_decode_back() -> None:
    window = SensorWindowAverage("s-1", "east", 0, 10_000, 3, 2.0, 1.0, 3.0, 6)
    batch = pa.RecordBatch.from_pylist([window.to_avro()])
    assert isinstance(job.output, Avro)
    (encoded,) = job.output.arrow_encoder()(iter([batch]))
    assert encoded.column("key").to_pylist() == [b"s-1"]
    assert codec_for(SensorWindowAverage).decode(encoded.column("value")[0].as_py()) == window


def readings(n: int, prefix: str = "s") -> list[bytes | None]:
    codec = codec_for(SensorReading)
    return [codec.encode(SensorReading(f"{prefix}-{i % 7}", 1_700_000_000_000 + i, 1.0, i))
            for i in range(n)]


def test_shedding_drops_about_the_fraction_and_the_same_records_on_replay() -> None:
    rows = decode(job, readings(2000), shed=0.3)
    shed = [r["seq"] for r in rows if r["shed"]]
    assert 500 < len(shed) < 700  # 30 % of 2000, by a hash of the Kafka position
    assert [r["seq"] for r in decode(job, readings(2000), shed=0.3) if r["shed"]] == shed
    assert not any(r["shed"] for r in decode(job, readings(200), shed=0.0))


def test_only_low_priority_sensors_are_shed() -> None:
    values = readings(500, "low") + readings(500, "high")
    rows = decode(job, values, shed=0.5, settings={"low_priority_prefixes": "low-"})
    assert {r["sensor_id"].split("-")[0] for r in rows if r["shed"]} == {"low"}
    assert 150 < sum(r["shed"] for r in rows) < 350


def test_udf_versions_are_deterministic_and_different() -> None:
    batch = pa.RecordBatch.from_pylist([
        {"sensor_id": f"s-{i}", "event_time_ms": i, "value": 1.0, "seq": i}
        for i in range(50)])
    v1 = {r["region"] for r in pa.Table.from_batches(
        list(enrich(iter([batch]), job.functions["v1"], 0))).to_pylist()}
    v2 = {r["region"] for r in pa.Table.from_batches(
        list(enrich(iter([batch]), job.functions["v2"], 0))).to_pylist()}
    assert v1 <= {"north", "south", "east", "west"}
    assert v2 and all(r.rsplit("-", 1)[0] in {"north", "south", "east", "west"} for r in v2)
    assert v1.isdisjoint(v2)
    assert job.functions == {"v1": region_of, "v2": subregion_of}
