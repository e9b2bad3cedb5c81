"""Avro records, single-object encoded (the default) or plain (the bare binary body).

Single-object encoding (`C3 01`, the schema's 8-byte fingerprint, the body) is how every
streamctl record is framed (`schemas.single_object`): a reader finds the writer's schema by
its fingerprint, so producers can evolve their schema while the job lists the versions it
accepts (`writer_schemas`). Plain Avro carries no framing: every value must be written with
exactly `schema`. Logical types read as the type they annotate (a `timestamp-millis` is a
long of epoch milliseconds) and are written from it. A value that does not decode raises
`DecodeError` in words. Neighbours: `schemas.single_object` (framing, fingerprints), `types`
(columns), `api` (re-exports `Avro`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from schemas import single_object
from schemas.errors import DecodeError
from streaming_jobs.formats import types
from streaming_jobs.formats.base import (
    KEY_VALUE_SCHEMA,
    Decoder,
    FormatError,
    InputFormat,
    OutputFormat,
    output_problems,
)
from streaming_jobs.formats.ddl import Field

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

FRAMINGS = ("single-object", "plain")


def read_schema(schema: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """A schema given as a dict, JSON text, or the path of an `.avsc` file, as a plain dict."""
    if isinstance(schema, Path) or (isinstance(schema, str) and schema.endswith(".avsc")):
        try:
            text = Path(schema).read_text()
        except OSError as exc:
            raise FormatError(f"cannot read the Avro schema file {schema}: {exc}") from None
        schema = text
    if isinstance(schema, str):
        try:
            loaded = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise FormatError(f"the Avro schema is not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise FormatError("the Avro schema must be a record schema (a JSON object)")
        return loaded
    return {k: v for k, v in dict(schema).items() if not k.startswith("__")}


def full_name(schema: Mapping[str, Any]) -> str:
    name = str(schema.get("name", "?"))
    namespace = schema.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name


@dataclass(frozen=True)
class Avro(InputFormat, OutputFormat):
    """Avro records of `schema` (a dict, JSON text or an `.avsc` path). `framing` is
    'single-object' (fingerprinted, the default) or 'plain'; `key` names the output column
    used as the Kafka key; `writer_schemas` are older (or newer) versions a single-object
    input also accepts, resolved to `schema`."""

    schema: Mapping[str, Any] | str | Path
    framing: str = "single-object"
    key: str | None = None
    writer_schemas: tuple[Mapping[str, Any] | str | Path, ...] = ()
    _raw: dict[str, Any] = field(init=False, repr=False, compare=False)
    _fields: tuple[Field, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.framing not in FRAMINGS:
            raise FormatError(f"framing must be one of {', '.join(FRAMINGS)}, got "
                             f"{self.framing!r}")
        raw = read_schema(self.schema)
        try:
            single_object.parse(raw)  # a clear error for an invalid schema, here
        except ValueError as exc:
            raise FormatError(str(exc)) from None
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "_fields", types.from_avro(raw, full_name(raw)))
        if self.writer_schemas and self.framing == "plain":
            raise FormatError("writer_schemas need the single-object framing: plain Avro "
                             "carries no fingerprint to tell the versions apart")

    @property
    def name(self) -> str:
        return full_name(self._raw)

    @property
    def fingerprint(self) -> bytes:
        return single_object.fingerprint(self._raw)

    def fields(self) -> tuple[Field, ...]:
        return self._fields

    def decoder(self) -> Decoder:
        writers = {single_object.fingerprint(w): single_object.without_logical_types(w)
                   for w in (read_schema(s) for s in self.writer_schemas)}
        reader = single_object.without_logical_types(self._raw)
        writers[self.fingerprint] = reader
        return AvroDecoder(self.framing == "single-object", writers, reader, self.name)

    def describe(self) -> str:
        key = f", key {self.key}" if self.key else ""
        return f"Avro {self.framing} {self.name} ({self.fingerprint.hex()}{key})"

    def problems(self, schema: StructType) -> list[str]:
        return output_problems(self._fields, self.key, schema, f"the field of {self.name}")

    def encode(self, rows: DataFrame) -> DataFrame:
        return rows.mapInArrow(self.arrow_encoder(), KEY_VALUE_SCHEMA)

    def arrow_encoder(self) -> AvroEncoder:
        """The `mapInArrow` function `encode` runs: Arrow rows → key/value batches."""
        return AvroEncoder(single_object.without_logical_types(self._raw),
                           self.fingerprint if self.framing == "single-object" else None,
                           tuple(f.name for f in self._fields), self.key)


@dataclass(frozen=True)
class AvroDecoder:
    """Picklable: shipped to Spark tasks."""

    single_object: bool
    writers: Mapping[bytes, Any]
    reader: Any
    name: str

    def __call__(self, payload: bytes | None) -> Mapping[str, Any]:
        short = self.name.rsplit(".", 1)[-1]
        if not self.single_object:
            if payload is None:
                raise DecodeError(f"empty payload (a null value), expected an Avro {short}")
            return single_object.read_body(payload, self.reader, self.reader, short)
        fingerprint, body = single_object.split(payload, short)
        writer = self.writers.get(fingerprint)
        if writer is None:
            raise DecodeError(
                f"written with an unknown schema: fingerprint {fingerprint.hex()} is not one "
                f"of the {self.name} versions this job reads "
                f"({', '.join(f.hex() for f in self.writers)}); docs/schemas.md shows how a "
                "producer computes it")
        return single_object.read_body(body, writer, self.reader, short)


@dataclass(frozen=True)
class AvroEncoder:
    """The `mapInArrow` function that writes output rows as Avro (picklable)."""

    schema: Any
    fingerprint: bytes | None
    """None: plain Avro, no framing."""
    columns: tuple[str, ...]
    key: str | None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out_schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
        for batch in batches:
            keys, values = [], []
            for row in batch.to_pylist():
                body = single_object.write_body(self.schema, {c: _plain(row[c])
                                                              for c in self.columns})
                values.append(body if self.fingerprint is None
                              else single_object.frame(self.fingerprint, body))
                keys.append(None if self.key is None else _key_bytes(row[self.key]))
            yield pa.RecordBatch.from_pydict({"key": keys, "value": values}, schema=out_schema)


def _plain(value: Any) -> Any:
    """Arrow's Python values as fastavro takes them (a map column arrives as pairs)."""
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _key_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()
