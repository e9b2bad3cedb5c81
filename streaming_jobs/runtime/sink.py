"""The foreachBatch sink: the quiesce gate, then the official Kafka batch writer.

Owns what happens to one micro-batch's output: admit it through the gate (or refuse it before
executing anything), persist it so the stateful plan runs once, encode to Avro, write with
`write.format("kafka")`, count the rows, unpersist. Neighbours: `gate`, `lifecycle` (reads the
per-batch output counts when the batch's progress arrives).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from streaming_jobs.runtime.gate import BatchGate
from streaming_jobs.sensor_averages import ENCODED_SCHEMA, encode_averages

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class KafkaBatchSink:
    """Callable passed to `foreachBatch`; remembers output rows per batch id until taken."""

    def __init__(self, gate: BatchGate, bootstrap_servers: str, topic: str) -> None:
        self._gate = gate
        self._bootstrap_servers = bootstrap_servers
        self._topic = topic
        self._lock = threading.Lock()
        self._output_rows: dict[int, int] = {}

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self._gate.admit(batch_id)  # raises before anything of the batch executes
        batch_df.persist()
        try:
            rows = batch_df.count()
            if rows:
                (batch_df.mapInArrow(encode_averages, ENCODED_SCHEMA)
                 .write.format("kafka")
                 .option("kafka.bootstrap.servers", self._bootstrap_servers)
                 .option("topic", self._topic)
                 .save())
        finally:
            batch_df.unpersist()
        with self._lock:
            self._output_rows[batch_id] = rows

    def take_output_rows(self, batch_id: int) -> int:
        """Rows written by `batch_id` (0 if the sink did not see it), forgetting older ids."""
        with self._lock:
            rows = self._output_rows.pop(batch_id, 0)
            for older in [b for b in self._output_rows if b < batch_id]:
                del self._output_rows[older]
            return rows
