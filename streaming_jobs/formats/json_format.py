"""JSON records: one object per Kafka value, with a declared schema.

As input, each value must be a UTF-8 JSON object; its members are converted to the declared
columns (a Spark DDL string), and a value that is not — not JSON, not an object, a `NOT NULL`
field missing, a member of the wrong type — raises `DecodeError` saying which and why. Members
the schema does not declare are ignored, so producers can add fields. As output, every column
(or the declared ones) is written with Spark's own `to_json`, keyed by the `key` column.
Neighbours: `ddl` (the schema), `base` (the check of the output columns), `api` (re-exports
`Json`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from schemas.errors import DecodeError
from streaming_jobs.formats import ddl
from streaming_jobs.formats.base import (
    Decoder,
    FormatError,
    InputFormat,
    OutputFormat,
    key_column,
    output_problems,
)
from streaming_jobs.formats.ddl import Field, Type

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

_RANGES = {"byte": 2**7, "short": 2**15, "int": 2**31, "long": 2**63}


@dataclass(frozen=True)
class Json(InputFormat, OutputFormat):
    """JSON objects. `schema` is a Spark DDL string (`"user_id string not null, ts long"`),
    required to read and optional to write (then only its fields are written); `key` names
    the output column used as the Kafka key."""

    schema: str = ""
    key: str | None = None
    _fields: tuple[Field, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_fields", ddl.parse(self.schema) if self.schema.strip()
                           else ())

    def fields(self) -> tuple[Field, ...]:
        if not self._fields:
            raise FormatError("Json(schema=…) needs a schema to be read: the columns the job "
                             "receives, e.g. Json(\"user_id string not null, ts long\")")
        return self._fields

    def decoder(self) -> Decoder:
        return JsonDecoder(self.fields())

    def describe(self) -> str:
        parts = [f"{len(self._fields)} fields"] if self._fields else []
        parts += [f"key {self.key}"] if self.key else []
        return "JSON" + (f" ({', '.join(parts)})" if parts else "")

    def problems(self, schema: StructType) -> list[str]:
        return output_problems(self._fields, self.key, schema, "the declared JSON field")

    def encode(self, rows: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        names = [f.name for f in self._fields] or rows.columns
        value = F.to_json(F.struct(*[F.col(n) for n in names])).cast("binary").alias("value")
        return rows.select(key_column(rows, self.key), value)


@dataclass(frozen=True)
class JsonDecoder:
    """Picklable: shipped to Spark tasks."""

    fields: tuple[Field, ...]

    def __call__(self, payload: bytes | None) -> Mapping[str, Any]:
        if payload is None:
            raise DecodeError("empty payload (a null value), expected a JSON object")
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not UTF-8 text: byte {exc.start} is "
                              f"{payload[exc.start:exc.start + 1].hex()}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DecodeError(f"not valid JSON: {exc.msg} at line {exc.lineno} column "
                              f"{exc.colno}") from None
        if not isinstance(data, dict):
            raise DecodeError(f"a JSON object was expected, got {_json_kind(data)}")
        return _struct(self.fields, data, "")


def _struct(fields: tuple[Field, ...], data: Mapping[str, Any], path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        where = f"{path}{f.name}"
        value = data.get(f.name)
        if value is None:
            if f.required:
                what = "is null" if f.name in data else "is missing"
                raise DecodeError(f"field {where!r} {what}, and the schema says NOT NULL")
            out[f.name] = None
        else:
            out[f.name] = _convert(value, f.type, where)
    return out


def _convert(value: Any, t: Type, where: str) -> Any:
    kind = t.kind
    if value is None:
        return None
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind in _RANGES and isinstance(value, int) and not isinstance(value, bool):
        if not -_RANGES[kind] <= value < _RANGES[kind]:
            raise DecodeError(f"field {where!r}: {value} does not fit a {kind}")
        return value
    if kind in ("float", "double") and isinstance(value, (int, float)) \
            and not isinstance(value, bool):
        return float(value)
    if kind in ("timestamp", "date") and isinstance(value, str):
        return _time(value, kind, where)
    if kind == "array" and isinstance(value, list):
        assert t.element is not None
        return [_convert(v, t.element, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, dict):
        assert t.element is not None
        return [(k, _convert(v, t.element, f"{where}.{k}")) for k, v in value.items()]
    if kind == "struct" and isinstance(value, dict):
        return _struct(t.fields, value, f"{where}.")
    raise DecodeError(f"field {where!r}: expected {_expected(t)}, got {_json_kind(value)}")


def _time(text: str, kind: str, where: str) -> Any:
    try:
        if kind == "date":
            return date.fromisoformat(text)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise DecodeError(f"field {where!r}: {text!r} is not an ISO-8601 {kind}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _expected(t: Type) -> str:
    if t.kind in _RANGES:
        return f"a {t.kind} (an integer)"
    if t.kind in ("float", "double"):
        return f"a {t.kind} (a number)"
    if t.kind in ("timestamp", "date"):
        return f"a {t.kind} (an ISO-8601 string)"
    return {"string": "a string", "boolean": "true or false", "array": "a JSON array",
            "map": "a JSON object", "struct": "a JSON object"}.get(t.kind, t.kind)


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {json.dumps(shown)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"
