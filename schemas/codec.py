"""The one codec for streamctl's own records: Avro single-object encoding, typed.

Framing (`single_object`): two marker bytes `C3 01`, the 8-byte little-endian CRC-64-AVRO
fingerprint of the writer schema's parsing canonical form, then the Avro binary body. The
fingerprint lets a reader pick the writer schema without a registry service, and Avro schema
resolution makes evolution possible: a reader knows every writer schema it was shipped with
(`register_writer_schema`) and resolves it against the record's current schema.

Decoding never raises anything but `DecodeError`, which carries the topic, partition and
offset when the caller knows them, so garbage on a topic can be counted and logged with
context instead of crashing a process.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

import fastavro

from schemas import single_object
from schemas.errors import DecodeError
from schemas.single_object import MAGIC

__all__ = ["MAGIC", "Codec", "DecodeError", "codec_for", "load_schema"]

from schemas.records import (
    Ack,
    CardTransaction,
    CommitMarker,
    ControlTuple,
    Decision,
    DesiredStateRecord,
    ScoredTransaction,
    SensorReading,
    SensorWindowAverage,
    TaskMetrics,
    _Record,
)

R = TypeVar("R", bound=_Record)


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
        self.fingerprint = single_object.fingerprint(self.schema)
        # A schema given is an earlier writer's: it writes the dict form, as every version
        # before a packed field did; the shipped one writes the record's wire form.
        self._wire_form = record_type.to_wire if schema is None else record_type.to_avro
        self._writers: dict[bytes, Any] = {self.fingerprint: self.schema}
        if schema is None:
            for previous in previous_schemas(record_type.AVRO_NAME):
                self.register_writer_schema(previous)

    def register_writer_schema(self, writer_schema: dict[str, Any]) -> None:
        """Accept records written with an older (or newer) compatible schema."""
        parsed = fastavro.parse_schema(writer_schema)
        self._writers[single_object.fingerprint(parsed)] = parsed

    def encode(self, record: R) -> bytes:
        return single_object.frame(self.fingerprint,
                                   single_object.write_body(self.schema, self._wire_form(record)))

    def decode(
        self,
        payload: bytes | None,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> R:
        name = self.record_type.AVRO_NAME.rsplit(".", 1)[-1]
        try:
            fingerprint, body = single_object.split(payload, name)
            writer = self._writers.get(fingerprint)
            if writer is None:
                raise DecodeError(
                    f"written with an unknown schema: fingerprint {fingerprint.hex()} is not "
                    f"one of the {self.record_type.AVRO_NAME} schemas this reader knows "
                    f"({', '.join(f.hex() for f in self._writers)})")
            data = single_object.read_body(body, writer, self.schema, name)
            try:
                return self.record_type.from_avro(data)
            except Exception as exc:
                raise DecodeError(f"not a valid {name}: {exc}") from exc
        except DecodeError as err:
            raise err.at(topic=topic, partition=partition, offset=offset) from err.__cause__


_CODECS: dict[type[_Record], Codec[Any]] = {}


def codec_for(record_type: type[R]) -> Codec[R]:
    """The shared codec instance for a record type (schemas are parsed once per process)."""
    codec = _CODECS.get(record_type)
    if codec is None:
        codec = _CODECS[record_type] = Codec(record_type)
    return codec


ALL_RECORD_TYPES: tuple[type[_Record], ...] = (
    TaskMetrics, ControlTuple, Ack, Decision, SensorReading, SensorWindowAverage,
    CardTransaction, ScoredTransaction, DesiredStateRecord, CommitMarker,
)
