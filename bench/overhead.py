"""Benchmark: what the runtime's instrumentation costs — the same query with and without it.

Every run reads the same preloaded sensor readings from one topic (from its start, with a
checkpoint of its own) in one SparkSession, through the same plan (`Plan.build`: the Kafka
source with the same batch cap and parallelism, the decode step, the job's builder) into the
same exactly-once sink, alternating the two modes `--runs` times each, after one run of each
that is not counted (the JVM's code is cold in the first runs):

- bare: the plan written through the transactional sink behind an open gate, nothing else:
  no progress listener, no metrics or heartbeats published, no Prometheus figures, no control
  consumer, no role thread, no per-batch knobs.
- runtime: the job as `streamctl job run` runs it (`ElasticJob`): all of the above.

Both are measured alike, from Spark's own progress of the query (`recentProgress`): the rows
of the batches after the first over the time from the first batch's end to the last one's.

    .venv/bin/python -m bench.overhead --records 48000 --runs 4

prints a table and writes `bench/results/overhead.json`.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import record
from bench.bed import CONTROL_KEY, local_broker
from bench.throughput import preload
from streamctl.stack.connector import spark_kafka_jars
from streamctl.stack.topics import TopicSpec, ensure_topics
from streaming_jobs.config import JobConfig, bind, grouped
from streaming_jobs.jobs.sensor_averages import job as sensor_job
from streaming_jobs.loading import worker_path
from streaming_jobs.runtime.kafka import DeadLetterFactory
from streaming_jobs.runtime.query.plan import Plan
from streaming_jobs.runtime.query.session import build_session
from streaming_jobs.runtime.sink.foreach_batch import transactional_sink
from streaming_jobs.runtime.sink.gate import BatchGate

BATCH_CAP = 4000
TRIGGER_S = 0.1
"""Far shorter than a batch: batches run back to back, as under a backlog, so a run's figure
is what the mode sustains, not the trigger's cadence (4000 rows per 1 s trigger would cap both
modes at the same ~4000 rows/s)."""
TASK_SLOTS = 4
RUN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Run:
    mode: str
    records: int
    batches: int
    median_batch_s: float
    rows_per_s: float


def config(bootstrap: str, input_topic: str, tag: str, workdir: Path,
           cost_ms: float) -> JobConfig:
    """The job's configuration for one run: its own query id, output and control topics."""
    names = {k: f"bench-overhead-{tag}-{k}" for k in ("out", "dlq", "metrics", "control",
                                                      "acks", "state")}
    ensure_topics(bootstrap, [TopicSpec(names["out"], 2), *(
        TopicSpec(names[k]) for k in ("dlq", "metrics", "control", "acks")),
        TopicSpec(names["state"], config={"cleanup.policy": "compact"})])
    return bind(grouped(dict(
        bootstrap_servers=bootstrap, job=sensor_job.name, query_id=f"bench-overhead-{tag}",
        input_topic=input_topic, output_topic=names["out"], dlq_topic=names["dlq"],
        metrics_topic=names["metrics"], control_topic=names["control"],
        ack_topic=names["acks"], state_topic=names["state"],
        checkpoint_dir=str(workdir / tag), input_parallelism=2, task_slots=TASK_SLOTS,
        max_offsets_per_trigger=BATCH_CAP, trigger_interval_s=TRIGGER_S, metrics_port=0,
        spark_jars=",".join(str(p) for p in spark_kafka_jars()), control_key=CONTROL_KEY.encode(),
        settings=(("enrichment_cost_ms", cost_ms),))), sensor_job)


def start_bare(spark: Any, cfg: JobConfig) -> tuple[Any, Any, Any]:
    """The sensor job's plan through the transactional sink behind an open gate, nothing
    else: the running query, its sink (to close) and the frame it was built from."""
    plan = Plan(sensor_job)
    sink = transactional_sink(BatchGate(), cfg.bootstrap_servers, cfg.identity.query_id,
                              cfg.topics.output_topic, sensor_job.output)
    frame = plan.build(spark, cfg.run, cfg.initial_state(),
                    DeadLetterFactory(cfg.bootstrap_servers, cfg.topics.dlq_topic))
    query = (frame.writeStream.queryName(cfg.identity.query_id).outputMode(plan.output_mode)
             .foreachBatch(sink).option("checkpointLocation", cfg.storage.checkpoint_dir)
             .trigger(processingTime=f"{int(cfg.timing.trigger_interval_s * 1000)} milliseconds")
             .start())
    return query, sink, frame


def run_bare(spark: Any, cfg: JobConfig, records: int) -> Run:
    query, sink, _frame = start_bare(spark, cfg)
    try:
        return measure("bare", lambda: query, records)
    finally:
        query.stop()
        sink.close()


def run_runtime(spark: Any, cfg: JobConfig, records: int) -> Run:
    from streaming_jobs.runtime.job import ElasticJob

    job = ElasticJob(sensor_job, cfg, spark=spark)
    job.start()
    try:
        return measure("runtime", lambda: _active(spark, cfg.identity.query_id), records)
    finally:
        job.stop()


def _active(spark: Any, name: str) -> Any:
    return next((q for q in spark.streams.active if q.name == name), None)


def measure(mode: str, query: Callable[[], Any], records: int) -> Run:
    """Wait until the query has read `records`; its throughput after the first batch."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        running = query()
        progress = [p for p in (running.recentProgress if running else [])
                    if p["numInputRows"] > 0]
        if sum(p["numInputRows"] for p in progress) >= records:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{mode}: the query read fewer than {records} records in "
                               f"{RUN_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
    progress.sort(key=lambda p: p["batchId"])
    if len(progress) < 3:
        raise RuntimeError(f"{mode}: only {len(progress)} batches; preload more records")
    warm = progress[1:]
    span_s = (_end_ms(warm[-1]) - _end_ms(progress[0])) / 1000
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in warm]
    return Run(mode, records, len(progress), round(statistics.median(durations), 2),
               round(sum(p["numInputRows"] for p in warm) / span_s, 1))


def _end_ms(progress: dict[str, Any]) -> int:
    from datetime import datetime

    start = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00"))
    return int(start.timestamp() * 1000) + int(progress["durationMs"]["triggerExecution"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=48_000, help="records per run")
    parser.add_argument("--runs", type=int, default=4, help="counted runs of each mode")
    parser.add_argument("--enrichment-cost-ms", type=float, default=0.0,
                        help="the job's simulated lookup latency per record (0: the query's "
                             "own work only, where the instrumentation's share is largest)")
    args = parser.parse_args()
    load_before = record.load_average()
    runs: list[Run] = []
    with local_broker("streamctl-bench-overhead-") as bed:
        workdir, bootstrap = bed.workdir, bed.bootstrap_servers
        topic = "bench-overhead-in"
        ensure_topics(bootstrap, [TopicSpec(topic, partitions=2)])
        preload(bootstrap, topic, args.records)
        first = config(bootstrap, topic, "session", workdir, args.enrichment_cost_ms)
        spark = build_session(first, worker_path(sensor_job))
        try:
            for i in range(args.runs + 1):  # run 0 of each mode warms the JVM up
                for mode, run in (("bare", run_bare), ("runtime", run_runtime))[
                        ::1 if i % 2 == 0 else -1]:
                    cfg = config(bootstrap, topic, f"{mode}-{i}", workdir,
                                 args.enrichment_cost_ms)
                    measured = run(spark, cfg, args.records)
                    print(f"  {mode} run {i}{' (warm-up)' if i == 0 else ''}: "
                          f"{measured.rows_per_s:.0f} rows/s")
                    if i > 0:
                        runs.append(measured)
        finally:
            spark.stop()
    _report(runs, args.enrichment_cost_ms, load_before)
    return 0


def ratio(runs: list[Run]) -> float:
    """The runtime's median throughput over the bare query's."""
    def median(mode: str) -> float:
        return statistics.median(r.rows_per_s for r in runs if r.mode == mode)

    return round(median("runtime") / median("bare"), 3)


def _report(runs: list[Run], cost_ms: float, load_before: float) -> None:
    print(f"\nthe runtime's overhead, sensor job, enrichment cost {cost_ms} ms/record, "
          f"{BATCH_CAP}-record batches back to back, local[{TASK_SLOTS}], "
          f"{platform.machine()}")
    print(f"{'mode':<8} {'batches':>7} {'median batch s':>14} {'rows/s':>8}")
    for r in runs:
        print(f"{r.mode:<8} {r.batches:>7} {r.median_batch_s:>14.2f} {r.rows_per_s:>8.0f}")
    print(f"runtime / bare (medians): {ratio(runs):.3f}")
    record.write("overhead", {"enrichment_cost_ms": cost_ms, "batch_cap": BATCH_CAP,
                              "trigger_s": TRIGGER_S,
                              "ratio": ratio(runs), "runs": [asdict(r) for r in runs]},
                 load_before)


if __name__ == "__main__":
    raise SystemExit(main())
