"""The wire contract of streamctl: Avro schemas, the records that mirror them, one codec.

Imports nothing else of the project; `controller` and `streaming_jobs` talk only through
Kafka in these types.
"""

from schemas.codec import Codec, codec_for
from schemas.errors import DecodeError
from schemas.records import (
    Ack,
    CardTransaction,
    ControlTuple,
    Decision,
    DesiredStateRecord,
    KnobSetting,
    Outcome,
    Role,
    ScoredTransaction,
    SensorReading,
    SensorWindowAverage,
    SourcePartition,
    TaskMetrics,
)

__all__ = [
    "Ack",
    "CardTransaction",
    "Codec",
    "ControlTuple",
    "Decision",
    "DecodeError",
    "DesiredStateRecord",
    "KnobSetting",
    "Outcome",
    "Role",
    "ScoredTransaction",
    "SensorReading",
    "SensorWindowAverage",
    "SourcePartition",
    "TaskMetrics",
    "codec_for",
]
