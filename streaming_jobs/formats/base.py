"""What a record format is to the runtime: decode Kafka values into columns, encode rows back.

Owns the two interfaces a job's declared formats implement. An `InputFormat` names its fields
(the columns the job's builder receives) and gives a picklable `Decoder` that Spark tasks call
per record; a record that does not decode raises `DecodeError` in words, and the runtime sends
it to the job's dead-letter topic. An `OutputFormat` checks the builder's columns when the job
is loaded and turns the output rows into Kafka's `key binary, value binary` in the sink;
`output_problems` is that check for a format that writes declared fields.
Neighbours: `json_format`, `avro_format`, `key_value` (the formats), `types` (whether a column
fits a field), `runtime.query.input` (decodes), `runtime.sink.foreach_batch` (encodes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from streaming_jobs.errors import UserError
from streaming_jobs.formats.ddl import Field

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

class FormatError(UserError):
    """A format declared wrongly (a schema that does not parse, an unknown framing, a type
    with no Spark column); the message says which and where."""


KEY_VALUE_SCHEMA = "key binary, value binary"
"""What every output format produces: the Kafka record's key (may be null) and value."""


class Decoder(Protocol):
    """Runs in Spark tasks (pickled): one Kafka value → one record's columns, or
    `schemas.DecodeError` saying in words what is wrong with it."""

    def __call__(self, payload: bytes | None) -> Mapping[str, Any]: ...


class InputFormat(ABC):
    """How a job's input topic is written."""

    @abstractmethod
    def fields(self) -> tuple[Field, ...]:
        """The columns a decoded record has, in order."""

    @abstractmethod
    def decoder(self) -> Decoder: ...

    @abstractmethod
    def describe(self) -> str:
        """One phrase for messages and `job describe`, e.g. 'JSON (3 fields)'."""


class OutputFormat(ABC):
    """How a job's output rows become Kafka records."""

    @abstractmethod
    def problems(self, schema: StructType) -> list[str]:
        """Why rows of `schema` cannot be written in this format (empty: they can)."""

    @abstractmethod
    def encode(self, rows: DataFrame) -> DataFrame:
        """`rows` as `key binary, value binary` (a Spark transformation, run in the sink)."""

    @abstractmethod
    def describe(self) -> str: ...


def output_problems(fields: Sequence[Field], key: str | None, schema: StructType,
                    owner: str) -> list[str]:
    """Why rows of `schema` cannot be written as records of `fields` keyed by `key` (empty:
    they can): the key column, then a fitting column per field; `owner` names the fields in
    the message (e.g. 'the declared JSON field')."""
    from streaming_jobs.formats import types  # imports pyspark, which this module defers

    problems = _key_problems(key, schema)
    columns = {f.name: f.dataType for f in schema.fields}
    for wanted in fields:
        if wanted.name not in columns:
            problems.append(f"no column {wanted.name!r} for {owner}")
        else:
            problems += types.fit_problems(wanted.name, columns[wanted.name], wanted.type)
    return problems


def _key_problems(key: str | None, schema: StructType) -> list[str]:
    """A declared key column must exist and be a string, binary or integer column."""
    from pyspark.sql import types as T

    if key is None:
        return []
    columns = {f.name: f.dataType for f in schema.fields}
    if key not in columns:
        return [f"the key column {key!r} is not among the output columns "
                f"({', '.join(columns) or 'none'})"]
    if not isinstance(columns[key], (T.StringType, T.BinaryType, T.IntegralType)):
        return [f"the key column {key!r} is {columns[key].simpleString()}; a key must be a "
                "string, binary or integer column"]
    return []


def key_column(rows: DataFrame, key: str | None) -> Any:
    """The Kafka key of each row: the key column's bytes (UTF-8 for text), or null."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if key is None:
        return F.lit(None).cast("binary").alias("key")
    column_type = rows.schema[key].dataType
    column = F.col(key) if isinstance(column_type, T.BinaryType) else F.col(key).cast("string")
    return column.cast("binary").alias("key")
