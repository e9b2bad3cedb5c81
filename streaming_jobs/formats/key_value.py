"""The output format that encodes nothing: the job's builder returns the Kafka record itself.

Its rows have a `value` column (binary or string) and may have a `key` column (binary, string
or null); anything else is a mistake the check names at load time, with the formats that would
encode the other columns. Neighbours: `base` (the interface), `api` (the default output).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from streaming_jobs.formats.base import OutputFormat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class KeyValue(OutputFormat):
    """The builder returns `value` (binary or string) and optionally `key`."""

    def problems(self, schema: StructType) -> list[str]:
        from pyspark.sql import types as T

        columns = {f.name: f.dataType for f in schema.fields}
        problems = []
        if "value" not in columns:
            problems.append(f"no 'value' column (got {', '.join(columns) or 'none'}); return "
                            "key/value columns, or declare output=Json(…) or Avro(…) to "
                            "encode the columns")
        for name in ("key", "value"):
            if name in columns and not isinstance(columns[name], (T.BinaryType, T.StringType)):
                problems.append(f"column {name!r} is {columns[name].simpleString()}; it must be "
                                "binary or string")
        extra = sorted(set(columns) - {"key", "value"})
        if extra:
            problems.append(f"columns {', '.join(extra)} are not written: the output takes only "
                            "key and value (declare output=Json(…) or Avro(…) to encode others)")
        return problems

    def encode(self, rows: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        key = (F.col("key").cast("binary") if "key" in rows.columns
               else F.lit(None).cast("binary"))
        return rows.select(key.alias("key"), F.col("value").cast("binary").alias("value"))

    def describe(self) -> str:
        return "key/value columns"
