"""Benchmark: the cost of exactly-once output, old writer and transactional sink side by side.

Both sinks get the same micro-batches in the same run, alternating batch by batch so they share
whatever else the machine is doing: a cached DataFrame of `--rows` SensorWindowAverage rows per
batch, passed to the sink as `foreachBatch` would (gate open, batch ids 0, 1, ...).

- `at-least-once`: Spark's own Kafka writer (`write.format("kafka")`), the jobs' former sink.
- `transactional`: rows brought to the driver as Arrow and written with a commit marker in one
  Kafka transaction by a confluent-kafka producer.

    .venv/bin/python -m bench.sink --rows 100 2000 20000 --batches 12

prints a table and writes `bench/results/sink.json`. It starts its own broker and a local[4]
SparkSession; the first batch of each writer is warm-up and not counted.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bench import record
from bench.bed import local_broker
from schemas import SensorWindowAverage
from streamctl.stack.topics import TopicSpec, ensure_topics
from streaming_jobs.jobs.sensor_averages import job as sensor_job
from streaming_jobs.runtime.sink.foreach_batch import AtLeastOnceKafkaSink, transactional_sink
from streaming_jobs.runtime.sink.gate import BatchGate

ENCODER = sensor_job.output
Sink = Callable[[Any, int], None]


@dataclass(frozen=True)
class SinkResult:
    writer: str
    rows_per_batch: int
    batches: int
    median_batch_ms: float
    p90_batch_ms: float
    rows_per_s: float


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    from streamctl.stack.connector import spark_kafka_jars
    from streaming_jobs.runtime.query.session import prepare_environment

    prepare_environment()
    session = (SparkSession.builder.master("local[4]").appName("streamctl-bench-sink")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.jars", ",".join(str(p) for p in spark_kafka_jars()))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def batch_frame(spark: Any, rows: int) -> Any:
    """`rows` aggregated rows, cached, in 2 partitions (as the job's 2 state partitions)."""
    data = [SensorWindowAverage(f"sensor-{i % 500:03d}", "north", 1_700_000_000_000 + i,
                                1_700_000_010_000 + i, 40, 20.5, 1.0, 40.0, i).to_avro()
            for i in range(rows)]
    frame = spark.createDataFrame(data).repartition(2).cache()
    frame.count()
    return frame


def time_batches(sinks: dict[str, Sink], frame: Any, batches: int) -> dict[str, list[float]]:
    """Seconds per batch per writer, alternating writers (and their order) batch by batch."""
    times: dict[str, list[float]] = {name: [] for name in sinks}
    names = list(sinks)
    for batch_id in range(batches + 1):
        for name in names if batch_id % 2 == 0 else reversed(names):
            started = time.perf_counter()
            sinks[name](frame, batch_id)
            if batch_id > 0:  # batch 0 is warm-up (connections, JIT, metadata)
                times[name].append(time.perf_counter() - started)
    return times


def run_size(bootstrap: str, spark: Any, rows: int, batches: int) -> list[SinkResult]:
    tag = f"{rows}-{int(time.time())}"
    old_out, new_out, markers = (f"bench-sink-{k}-{tag}" for k in ("alo", "txn", "markers"))
    ensure_topics(bootstrap, [TopicSpec(old_out, 2), TopicSpec(new_out, 2),
                              TopicSpec(markers, 1, config={"cleanup.policy": "compact"})])
    txn = transactional_sink(BatchGate(), bootstrap, f"bench-{tag}", new_out, ENCODER,
                             marker_topic=markers)
    sinks: dict[str, Sink] = {
        "at-least-once": AtLeastOnceKafkaSink(BatchGate(), bootstrap, old_out, ENCODER),
        "transactional": txn,
    }
    frame = batch_frame(spark, rows)
    try:
        times = time_batches(sinks, frame, batches)
    finally:
        txn.close()
        frame.unpersist()
    return [SinkResult(name, rows, len(ts), round(statistics.median(ts) * 1000, 1),
                       round(sorted(ts)[int(0.9 * (len(ts) - 1))] * 1000, 1),
                       round(rows / statistics.median(ts), 1))
            for name, ts in times.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[100, 2000, 20_000],
                        help="output rows per batch (one measurement per value)")
    parser.add_argument("--batches", type=int, default=12, help="timed batches per writer")
    args = parser.parse_args()
    load_before = record.load_average()
    spark = spark_session()
    try:
        with local_broker("streamctl-bench-sink-") as bed:
            results = [r for rows in args.rows
                       for r in run_size(bed.bootstrap_servers, spark, rows, args.batches)]
    finally:
        spark.stop()
    report(results, load_before)
    return 0


def report(results: list[SinkResult], load_before: float) -> None:
    print(f"\nsink cost per micro-batch, {platform.machine()} with 2 cores, local[4] Spark, "
          "one local broker")
    print(f"{'rows/batch':>10}  {'writer':<14} {'median ms':>9}  {'p90 ms':>7}  "
          f"{'rows/s':>9}  {'vs old':>6}")
    old = {r.rows_per_batch: r for r in results if r.writer == "at-least-once"}
    for r in results:
        ratio = r.median_batch_ms / old[r.rows_per_batch].median_batch_ms
        print(f"{r.rows_per_batch:>10}  {r.writer:<14} {r.median_batch_ms:>9.1f}  "
              f"{r.p90_batch_ms:>7.1f}  {r.rows_per_s:>9.0f}  {ratio:>5.2f}x")
    record.write("sink", {"runs": [asdict(r) for r in results]}, load_before)


if __name__ == "__main__":
    raise SystemExit(main())
