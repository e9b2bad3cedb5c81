"""The record formats a job declares: what a JSON or Avro value decodes to, why one does not
(in words, for the dead-letter header), and which output columns each format can write."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import types as T

from schemas import single_object
from schemas.errors import DecodeError
from streaming_jobs.formats import Avro, Json, KeyValue

CLICK = {"type": "record", "name": "Click", "namespace": "example.v1", "fields": [
    {"name": "user_id", "type": "string"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "BUY"]}},
]}
CLICK_V0 = {**CLICK, "fields": [f for f in CLICK["fields"] if f["name"] != "referrer"]}
RECORD = {"user_id": "u1", "ts": 1_700_000_000_000, "tags": ["a"], "referrer": None,
          "kind": "BUY"}


def single(schema: dict, record: dict) -> bytes:
    parsed = single_object.without_logical_types(schema)
    return single_object.frame(single_object.fingerprint(schema),
                               single_object.write_body(parsed, record))


def reason(decoder: object, payload: bytes | None) -> str:
    with pytest.raises(DecodeError) as caught:
        decoder(payload)  # type: ignore[operator]
    return caught.value.reason


def test_json_objects_decode_to_the_declared_columns_and_extra_members_are_ignored() -> None:
    decode = Json("user_id string not null, ts long, score double, seen timestamp, "
                  "tags array<string>, attrs map<string, int>, geo struct<lat: double>"
                  ).decoder()
    record = decode(json.dumps({"user_id": "u", "ts": 5, "score": 2, "extra": True,
                                "seen": "2026-11-24T10:00:00Z", "tags": ["x"],
                                "attrs": {"a": 1}, "geo": {"lat": 1.5}}).encode())
    assert record["user_id"] == "u" and record["ts"] == 5 and record["score"] == 2.0
    assert record["seen"].isoformat() == "2026-11-24T10:00:00+00:00"
    assert record["tags"] == ["x"] and record["attrs"] == [("a", 1)]
    assert record["geo"] == {"lat": 1.5} and "extra" not in record
    assert decode(b'{"user_id": "u"}')["ts"] is None  # a nullable field may be missing


@pytest.mark.parametrize(("payload", "words"), [
    (None, "empty payload (a null value), expected a JSON object"),
    (b"\xff\x00", "not UTF-8 text: byte 0 is ff"),
    (b'{"user_id": "u", ', "not valid JSON: Expecting property name enclosed in double "
                          "quotes at line 1 column 18"),
    (b'["u"]', "a JSON object was expected, got an array"),
    (b'{"ts": 3}', "field 'user_id' is missing, and the schema says NOT NULL"),
    (b'{"user_id": null}', "field 'user_id' is null, and the schema says NOT NULL"),
    (b'{"user_id": "u", "ts": "3"}', "field 'ts': expected a long (an integer), got the "
                                     "string \"3\""),
    (b'{"user_id": "u", "ts": true}', "field 'ts': expected a long (an integer), got the "
                                      "boolean true"),
    (b'{"user_id": "u", "n": 300}', "field 'n': 300 does not fit a byte"),
    (b'{"user_id": "u", "at": "yesterday"}', "field 'at': 'yesterday' is not an ISO-8601 "
                                             "timestamp"),
])
def test_json_that_does_not_decode_says_why_in_words(payload: bytes | None,
                                                     words: str) -> None:
    decoder = Json("user_id string not null, ts long, n tinyint, at timestamp").decoder()
    assert reason(decoder, payload) == words


def test_avro_single_object_decodes_and_resolves_an_older_writer() -> None:
    fmt = Avro(CLICK, writer_schemas=(CLICK_V0,))
    decode = fmt.decoder()
    assert decode(single(CLICK, RECORD)) == RECORD  # the logical type read as its long
    old = {k: v for k, v in RECORD.items() if k != "referrer"}
    assert decode(single(CLICK_V0, old)) == {**old, "referrer": None}
    assert fmt.name == "example.v1.Click"
    assert fmt.fingerprint == single_object.fingerprint(json.dumps(CLICK))


def test_avro_that_does_not_decode_says_why_in_words() -> None:
    decode = Avro(CLICK).decoder()
    good = single(CLICK, RECORD)
    assert reason(decode, good[:-4]).startswith("truncated: the Avro body ends")
    assert reason(decode, good + b"\x00").startswith("1 trailing bytes after the Click record")
    assert "looks like JSON text" in reason(decode, b'{"user_id": "u"}')
    assert "looks like the Confluent wire format" in reason(decode, b"\x00\x00\x00\x00\x07abc")
    unknown = single(CLICK_V0, {k: v for k, v in RECORD.items() if k != "referrer"})
    assert reason(decode, unknown).startswith(
        f"written with an unknown schema: fingerprint {single_object.fingerprint(CLICK_V0).hex()}"
        " is not one of the example.v1.Click versions this job reads")
    assert "IndexError" not in reason(decode, good[:12])  # never a library's repr


def test_plain_avro_has_no_framing() -> None:
    fmt = Avro(json.dumps(CLICK), framing="plain")
    body = single_object.write_body(single_object.without_logical_types(CLICK), RECORD)
    assert fmt.decoder()(body) == RECORD
    assert reason(fmt.decoder(), body[:3]).startswith("truncated")
    with pytest.raises(ValueError, match="writer_schemas need the single-object framing"):
        Avro(CLICK, framing="plain", writer_schemas=(CLICK_V0,))


def columns(**types: T.DataType) -> T.StructType:
    return T.StructType([T.StructField(n, t) for n, t in types.items()])


def test_avro_output_names_missing_and_mistyped_columns() -> None:
    fmt = Avro(CLICK, key="user_id")
    fits = columns(user_id=T.StringType(), ts=T.IntegerType(), tags=T.ArrayType(T.StringType()),
                   referrer=T.StringType(), kind=T.StringType(), extra=T.DoubleType())
    assert fmt.problems(fits) == []  # an int column widens to the long field
    wrong = columns(user_id=T.StringType(), ts=T.DoubleType(), tags=T.StringType(),
                    kind=T.StringType())
    assert fmt.problems(wrong) == [
        "column 'ts' is double, the field needs long",
        "column 'tags' is string, the field needs array<string>",
        "no column 'referrer' for the field of example.v1.Click"]
    assert Avro(CLICK, key="nope").problems(fits)[0].startswith(
        "the key column 'nope' is not among the output columns")


def test_json_and_key_value_outputs_check_their_columns() -> None:
    assert Json(key="user_id").problems(columns(user_id=T.StringType())) == []
    assert Json(key="geo").problems(columns(geo=T.MapType(T.StringType(), T.StringType()))) == [
        "the key column 'geo' is map<string,string>; a key must be a string, binary or "
        "integer column"]
    assert KeyValue().problems(columns(key=T.StringType(), value=T.BinaryType())) == []
    assert KeyValue().problems(columns(user_id=T.StringType(), value=T.LongType())) == [
        "column 'value' is bigint; it must be binary or string",
        "columns user_id are not written: the output takes only key and value (declare "
        "output=Json(…) or Avro(…) to encode others)"]


def test_avro_output_encodes_what_the_input_format_decodes() -> None:
    import pyarrow as pa

    fmt = Avro(CLICK, key="user_id")
    batch = pa.RecordBatch.from_pylist([RECORD])
    (out,) = fmt.arrow_encoder()(iter([batch]))
    assert out.column("key").to_pylist() == [b"u1"]
    assert fmt.decoder()(out.column("value")[0].as_py()) == RECORD
    plain = Avro(CLICK, framing="plain").arrow_encoder()
    (body,) = plain(iter([batch]))
    assert Avro(CLICK, framing="plain").decoder()(body.column("value")[0].as_py()) == RECORD
