"""Record formats a job reads and writes: JSON, Avro (single-object or plain), key/value.

Users reach them through `streaming_jobs.api`; the runtime decodes input and encodes output
with them. Imports `schemas` (the framing), `streaming_jobs.errors` and pyspark's type classes
only.
"""

from streaming_jobs.formats.avro_format import Avro
from streaming_jobs.formats.base import InputFormat, OutputFormat
from streaming_jobs.formats.json_format import Json
from streaming_jobs.formats.key_value import KeyValue

__all__ = ["Avro", "InputFormat", "Json", "KeyValue", "OutputFormat"]
