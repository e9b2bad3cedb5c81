"""Decoding and enrichment on Arrow batches, including the dead-letter path (no Spark)."""

from __future__ import annotations

import pyarrow as pa

from schemas.codec import DecodeError, codec_for
from schemas.records import SensorReading, SensorWindowAverage
from streaming_jobs.sensor_averages import (
    ENRICHMENTS,
    ShedRule,
    decode_and_enrich,
    encode_averages,
    region_of,
)


class MemoryDeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, DecodeError]] = []
        self.flushed = False

    def send(self, payload: bytes | None, error: DecodeError) -> None:
        self.sent.append((payload, error))

    def flush(self) -> None:
        self.flushed = True


def kafka_batch(values: list[bytes | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "value": pa.array(values, pa.binary()), "topic": ["in"] * len(values),
        "partition": pa.array([1] * len(values), pa.int32()),
        "offset": pa.array(range(40, 40 + len(values)), pa.int64())})


def test_good_records_are_enriched_and_garbage_goes_to_dead_letters() -> None:
    good = SensorReading("s-1", 1_700_000_000_000, 21.5, 7)
    dead = MemoryDeadLetters()
    out = list(decode_and_enrich(
        iter([kafka_batch([codec_for(SensorReading).encode(good), b"garbage", None])]),
        cost_ms=0, dead_letters=dead))
    rows = pa.Table.from_batches(out).to_pylist()
    assert rows[0] == {"sensor_id": "s-1", "event_time_ms": 1_700_000_000_000, "value": 21.5,
                       "seq": 7, "region": region_of("s-1"), "dead_letter": False,
                       "shed": False}
    assert [r["dead_letter"] for r in rows] == [False, True, True]
    assert [(e.topic, e.partition, e.offset) for _, e in dead.sent] == [("in", 1, 41),
                                                                        ("in", 1, 42)]
    assert dead.sent[0][0] == b"garbage"
    assert dead.flushed


def test_region_lookup_is_deterministic_and_bounded() -> None:
    assert region_of("sensor-9") == region_of("sensor-9")
    assert {region_of(f"s{i}") for i in range(200)} == {"north", "south", "east", "west"}


def test_encoded_averages_decode_back() -> None:
    window = SensorWindowAverage("s-1", "east", 0, 10_000, 3, 2.0, 1.0, 3.0, 6)
    batch = pa.RecordBatch.from_pylist([window.to_avro()])
    (encoded,) = encode_averages(iter([batch]))
    assert encoded.column("key").to_pylist() == [b"s-1"]
    assert codec_for(SensorWindowAverage).decode(encoded.column("value")[0].as_py()) == window


def readings(n: int, prefix: str = "s") -> list[bytes | None]:
    codec = codec_for(SensorReading)
    return [codec.encode(SensorReading(f"{prefix}-{i % 7}", 1_700_000_000_000 + i, 1.0, i))
            for i in range(n)]


def enrich(values: list[bytes | None], shed: ShedRule, lookup: str = "v1") -> list[dict]:
    out = decode_and_enrich(iter([kafka_batch(values)]), cost_ms=0,
                            dead_letters=MemoryDeadLetters(), lookup=ENRICHMENTS[lookup],
                            shed=shed)
    return pa.Table.from_batches(list(out)).to_pylist()


def test_shedding_drops_about_the_fraction_and_the_same_records_on_replay() -> None:
    rows = enrich(readings(2000), ShedRule(0.3))
    shed = [r["seq"] for r in rows if r["shed"]]
    assert 500 < len(shed) < 700  # 30 % of 2000, by a hash of the Kafka position
    assert [r["seq"] for r in enrich(readings(2000), ShedRule(0.3)) if r["shed"]] == shed
    assert all(r["region"] is None for r in rows if r["shed"])  # no lookup paid for them
    assert not any(r["shed"] for r in enrich(readings(200), ShedRule(0.0)))


def test_only_low_priority_sensors_are_shed() -> None:
    values = readings(500, "low") + readings(500, "high")
    rows = enrich(values, ShedRule(0.5, low_priority_prefixes=("low-",)))
    assert {r["sensor_id"].split("-")[0] for r in rows if r["shed"]} == {"low"}
    assert 150 < sum(r["shed"] for r in rows) < 350


def test_udf_versions_are_deterministic_and_different() -> None:
    v1 = {r["region"] for r in enrich(readings(50), ShedRule(), "v1")}
    v2 = {r["region"] for r in enrich(readings(50), ShedRule(), "v2")}
    assert v1 <= {"north", "south", "east", "west"}
    assert v2 and all(r.rsplit("-", 1)[0] in {"north", "south", "east", "west"} for r in v2)
    assert v1.isdisjoint(v2)
