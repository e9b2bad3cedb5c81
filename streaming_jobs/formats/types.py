"""One type tree for every format: from a DDL string or an Avro schema to Spark's types, and
the check that an output DataFrame's columns fit a format's fields.

Owns the mapping Avro → `ddl.Type` (logical types read as the type they annotate: a
`timestamp-millis` is a long of epoch milliseconds), `ddl.Type` → Spark `DataType`, and
`fit_problems`, which says in words why a column cannot be written as a field. Imports
pyspark's type classes only (pure Python, no JVM), so a job is checked where it is declared.
Neighbours: `json_format`, `avro_format` (their schemas), `api` (declaration checks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import types as T

from streaming_jobs.errors import UserError
from streaming_jobs.formats.ddl import Field, Type

_SPARK_PRIMITIVES: dict[str, T.DataType] = {
    "string": T.StringType(), "boolean": T.BooleanType(), "byte": T.ByteType(),
    "short": T.ShortType(), "int": T.IntegerType(), "long": T.LongType(),
    "float": T.FloatType(), "double": T.DoubleType(), "timestamp": T.TimestampType(),
    "date": T.DateType(), "binary": T.BinaryType(),
}
_INTEGERS = {"byte": 0, "short": 1, "int": 2, "long": 3}
_AVRO_PRIMITIVES = {"string": "string", "boolean": "boolean", "int": "int", "long": "long",
                    "float": "float", "double": "double", "bytes": "binary"}


class UnsupportedSchema(UserError):
    """An Avro schema this runtime cannot map to Spark columns; the message names the part."""


def spark_type(t: Type) -> T.DataType:
    if t.kind == "array":
        assert t.element is not None
        return T.ArrayType(spark_type(t.element), containsNull=True)
    if t.kind == "map":
        assert t.element is not None
        return T.MapType(T.StringType(), spark_type(t.element), valueContainsNull=True)
    if t.kind == "struct":
        return struct_type(t.fields)
    return _SPARK_PRIMITIVES[t.kind]


def struct_type(fields: tuple[Field, ...]) -> T.StructType:
    # Every column is nullable in Spark's eyes: a NOT NULL field is enforced when a record
    # decodes, and Spark's own checks would otherwise reject a null a plan introduces.
    return T.StructType([T.StructField(f.name, spark_type(f.type), nullable=True)
                         for f in fields])


def from_avro(schema: Any, where: str = "") -> tuple[Field, ...]:
    """The fields of an Avro record schema (a parsed or plain dict)."""
    record = _type_of(schema, where or "the schema")
    if record.kind != "struct":
        raise UnsupportedSchema(f"{where or 'the schema'} must be an Avro record, "
                                f"not {record.kind}")
    return record.fields


def _type_of(schema: Any, where: str) -> Type:
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return Type(_AVRO_PRIMITIVES[schema])
        raise UnsupportedSchema(f"{where}: type {schema!r} is not supported (named types "
                                "must be defined inline)")
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise UnsupportedSchema(f"{where}: a union of several non-null types "
                                    f"({schema}) has no Spark column type; use one type, "
                                    "optionally with null")
        return _type_of(branches[0], where)
    if not isinstance(schema, Mapping):
        raise UnsupportedSchema(f"{where}: not an Avro schema: {schema!r}")
    kind = schema.get("type")
    if kind == "record":
        fields = tuple(Field(f["name"], _type_of(f["type"], f"{where}.{f['name']}"),
                             required=not _nullable(f["type"]))
                       for f in schema.get("fields", ()))
        return Type("struct", fields=fields)
    if kind == "array":
        return Type("array", element=_type_of(schema["items"], f"{where}[]"))
    if kind == "map":
        return Type("map", element=_type_of(schema["values"], f"{where}{{}}"))
    if kind == "enum":
        return Type("string")
    if kind == "fixed":
        return Type("binary")
    return _type_of(kind, where)  # {"type": "long", "logicalType": …}: the annotated type


def _nullable(schema: Any) -> bool:
    return isinstance(schema, list) and "null" in schema


def fit_problems(column: str, actual: T.DataType, wanted: Type) -> list[str]:
    """Why a column of Spark type `actual` cannot be written as a field of type `wanted`."""
    problem = _misfit(actual, wanted)
    return [] if problem is None else [
        f"column {column!r} is {actual.simpleString()}, the field needs {wanted.describe()}"
        + (f" ({problem})" if problem else "")]


def _misfit(actual: T.DataType, wanted: Type) -> str | None:
    """None when it fits; '' or a detail when it does not."""
    kind = wanted.kind
    if kind in _INTEGERS:
        name = {"integer": "int"}.get(actual.typeName(), actual.typeName())
        fits = name in _INTEGERS and _INTEGERS[name] <= _INTEGERS[kind]
        return None if fits else ""
    if kind in ("float", "double"):
        numeric = isinstance(actual, (T.FloatType, T.DoubleType, T.IntegralType))
        return None if numeric and not (kind == "float" and isinstance(actual, T.DoubleType)) \
            else ""
    if kind == "array":
        assert wanted.element is not None
        if not isinstance(actual, T.ArrayType):
            return ""
        return _misfit(actual.elementType, wanted.element)
    if kind == "map":
        assert wanted.element is not None
        if not isinstance(actual, T.MapType) or not isinstance(actual.keyType, T.StringType):
            return ""
        return _misfit(actual.valueType, wanted.element)
    if kind == "struct":
        if not isinstance(actual, T.StructType):
            return ""
        have = {f.name: f.dataType for f in actual.fields}
        for field in wanted.fields:
            if field.name not in have:
                return f"no field {field.name!r}"
            inner = _misfit(have[field.name], field.type)
            if inner is not None:
                return f"field {field.name!r}: {inner or 'wrong type'}"
        return None
    return None if actual == _SPARK_PRIMITIVES[kind] else ""
