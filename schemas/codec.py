"""The one codec for every record on every topic: Avro single-object encoding.

Framing (Avro specification, "Single-object encoding"): two marker bytes `C3 01`, the
8-byte little-endian CRC-64-AVRO fingerprint of the writer schema's parsing canonical
form, then the Avro binary body. The fingerprint lets a reader pick the writer schema
without a registry service, and Avro schema resolution makes evolution possible: a reader
knows every writer schema it was shipped with (`register_writer_schema`) and resolves it
against the record's current schema.

Decoding never raises anything but `DecodeError`, which carries the topic, partition and
offset when the caller knows them, so garbage on a topic can be counted and logged with
context instead of crashing a process.
"""

from __future__ import annotations

import io
import json
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas.records import (
    Ack,
    CardTransaction,
    ControlTuple,
    Decision,
    DesiredStateRecord,
    ScoredTransaction,
    SensorReading,
    SensorWindowAverage,
    TaskMetrics,
    _Record,
)

MAGIC = b"\xc3\x01"
_HEADER_LEN = len(MAGIC) + 8

R = TypeVar("R", bound=_Record)


class DecodeError(ValueError):
    """A payload that is not a valid single-object-encoded record of the expected type."""

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = [
            f"{name}={value}"
            for name, value in (("topic", self.topic), ("partition", self.partition),
                                ("offset", self.offset))
            if value is not None
        ]
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def at(self, *, topic: str | None, partition: int | None, offset: int | None) -> DecodeError:
        """The same error with the record's position filled in by a caller that knows it."""
        return DecodeError(self.reason, topic=topic, partition=partition, offset=offset)


def _schema_fingerprint(parsed: Any) -> bytes:
    # fastavro's hex string already holds the 8 bytes in little-endian order, which is the
    # order the specification (and Java's SchemaNormalization) puts on the wire.
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


@cache
def load_schema(avro_name: str) -> dict[str, Any]:
    """Parse the `.avsc` file that defines `avro_name` (e.g. 'io.streamctl.v1.Ack')."""
    for entry in resources.files("schemas").joinpath("avro").iterdir():
        if entry.name.endswith(".avsc"):
            raw = json.loads(entry.read_text())
            if f"{raw['namespace']}.{raw['name']}" == avro_name:
                return fastavro.parse_schema(raw)  # type: ignore[return-value]
    raise LookupError(f"no .avsc file under schemas/avro defines {avro_name}")


def previous_schemas(avro_name: str) -> list[dict[str, Any]]:
    """Earlier versions of a shipped schema (`schemas/history/<name>.<version>.avsc`).

    A reader must resolve records its writers produced before an upgrade: jobs and the
    controller are upgraded one at a time, and topics and recorded traces keep old records.
    Every schema change keeps the previous file here, and the codec accepts all of them.
    """
    found = []
    for entry in sorted(resources.files("schemas").joinpath("history").iterdir(),
                        key=lambda e: e.name):
        if entry.name.endswith(".avsc"):
            raw = json.loads(entry.read_text())
            if f"{raw['namespace']}.{raw['name']}" == avro_name:
                found.append(raw)
    return found


class Codec(Generic[R]):
    """Encodes and decodes one record type."""

    def __init__(self, record_type: type[R], schema: dict[str, Any] | None = None) -> None:
        """`schema` overrides the shipped one (tests of evolution write with old schemas)."""
        self.record_type = record_type
        self.schema = (
            fastavro.parse_schema(schema) if schema is not None
            else load_schema(record_type.AVRO_NAME)
        )
        self.fingerprint = _schema_fingerprint(self.schema)
        self._writers: dict[bytes, Any] = {self.fingerprint: self.schema}
        if schema is None:
            for previous in previous_schemas(record_type.AVRO_NAME):
                self.register_writer_schema(previous)

    def register_writer_schema(self, writer_schema: dict[str, Any]) -> None:
        """Accept records written with an older (or newer) compatible schema."""
        parsed = fastavro.parse_schema(writer_schema)
        self._writers[_schema_fingerprint(parsed)] = parsed

    def encode(self, record: R) -> bytes:
        buf = io.BytesIO()
        buf.write(MAGIC)
        buf.write(self.fingerprint)
        fastavro.schemaless_writer(buf, self.schema, record.to_avro())
        return buf.getvalue()

    def decode(
        self,
        payload: bytes | None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> R:
        def fail(reason: str) -> DecodeError:
            return DecodeError(reason, topic=topic, partition=partition, offset=offset)

        if payload is None:
            raise fail("empty payload (null value)")
        if len(payload) < _HEADER_LEN or payload[:2] != MAGIC:
            raise fail("not Avro single-object encoded (bad marker)")
        writer = self._writers.get(payload[2:_HEADER_LEN])
        if writer is None:
            raise fail(
                f"unknown writer schema fingerprint {payload[2:_HEADER_LEN].hex()} "
                f"for {self.record_type.AVRO_NAME}")
        body = io.BytesIO(payload[_HEADER_LEN:])
        try:
            data = fastavro.schemaless_reader(body, writer, self.schema)
            record = self.record_type.from_avro(data)  # type: ignore[arg-type]
        except Exception as exc:  # fastavro raises many types on garbage; one error out
            raise fail(f"corrupt {self.record_type.AVRO_NAME} body: {exc!r}") from exc
        if body.tell() != len(payload) - _HEADER_LEN:
            raise fail("trailing bytes after the record")
        return record


_CODECS: dict[type[_Record], Codec[Any]] = {}


def codec_for(record_type: type[R]) -> Codec[R]:
    """The shared codec instance for a record type (schemas are parsed once per process)."""
    codec = _CODECS.get(record_type)
    if codec is None:
        codec = _CODECS[record_type] = Codec(record_type)
    return codec


ALL_RECORD_TYPES: tuple[type[_Record], ...] = (
    TaskMetrics, ControlTuple, Ack, Decision, SensorReading, SensorWindowAverage,
    CardTransaction, ScoredTransaction, DesiredStateRecord,
)
