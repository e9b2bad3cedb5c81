"""Benchmark: what a `state_partitions` change costs with a large state — 10⁶ keys by default.

The pause of a state-partitions change is the quiesce (the running batch, at most one), the
offline repartitioning of the stopped query's state, and the restarted query's first batch,
which opens the state store from the checkpoint. This measures the last two, where the state's
size shows, on the sensor job's plan (a windowed aggregation per sensor, RocksDB state store):

1. preload `--keys` readings, each from a sensor of its own, all in one open event-time
   window (an hour, with an hour of allowed lateness), so every key stays in the state;
2. run the plan on them (availableNow, batches of at most 100 000, 2 state partitions, no
   enrichment cost) into nothing: the checkpoint then holds one state row per key;
3. copy the checkpoint; repartition one copy 2 → `--to` offline (`repartition_state`);
4. append a small batch of readings and restart the plan from each copy, the repartitioned
   one at `--to` partitions and the other at 2: from `start()` to the commit of its first
   batch, side by side in one SparkSession.

    .venv/bin/python -m bench.state_repartition --keys 1000000 --to 8

prints a table and writes `bench/results/state_repartition.json`.
"""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench import record
from bench.bed import local_broker
from bench.throughput import produce_readings
from schemas import SensorReading
from streamctl.stack.connector import spark_kafka_jars
from streamctl.stack.topics import TopicSpec, ensure_topics
from streaming_jobs.config import JobConfig, bind, changed, grouped
from streaming_jobs.jobs.sensor_averages import job as sensor_job
from streaming_jobs.loading import worker_path
from streaming_jobs.runtime.checkpoint.state_repartition import repartition_state
from streaming_jobs.runtime.kafka import DeadLetterFactory
from streaming_jobs.runtime.query.plan import Plan
from streaming_jobs.runtime.query.session import build_session

FROM_PARTITIONS = 2
ONE_WINDOW_S = 3600
"""Window and allowed lateness: every reading lands in one window that stays open."""
APPENDED = 1000
"""Readings the restarted queries' first batch reads (sensors the state already holds)."""
RUN_TIMEOUT_S = 1800.0
BUILD_BATCH = 100_000
"""Readings per batch while the state is built: the job's own limit on its batch cap."""


@dataclass(frozen=True)
class Restart:
    state_partitions: int
    start_to_first_commit_s: float
    first_batch_s: float
    """Spark's own `triggerExecution` of the first batch."""


def preload(bootstrap: str, topic: str, keys: int, first: int = 0) -> None:
    """One reading per sensor `first` … `first + keys - 1` (modulo `keys`), at one time."""
    now_ms = int(time.time() * 1000)
    produce_readings(bootstrap, topic, (
        SensorReading(f"sensor-{seq % keys:07d}", now_ms, 20.0, seq)
        for seq in range(first, first + keys)))


def run(spark: Any, config: JobConfig, partitions: int) -> tuple[float, list[Any]]:
    """The plan from `config`'s checkpoint over what its topic holds (availableNow), into
    nothing: seconds from `start()` to its first commit, and its progress."""
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    plan = Plan(sensor_job)
    frame = plan.build(spark, config.run, config.initial_state(),
                    DeadLetterFactory(config.bootstrap_servers, config.topics.dlq_topic))
    started = time.monotonic()
    query = (frame.writeStream.outputMode(plan.output_mode).foreachBatch(_drain)
             .option("checkpointLocation", config.storage.checkpoint_dir)
             .trigger(availableNow=True).start())
    first_commit = None
    deadline = started + RUN_TIMEOUT_S
    while True:
        active = query.isActive  # read first: a run that ends now has its progress already
        if first_commit is None and query.lastProgress is not None:
            first_commit = time.monotonic() - started
        if not active:
            break
        if time.monotonic() > deadline:
            query.stop()
            raise RuntimeError(f"the run did not finish in {RUN_TIMEOUT_S:.0f} s")
        time.sleep(0.05)
    if query.exception() is not None:
        raise RuntimeError(f"the run failed: {query.exception()}")
    if first_commit is None:
        raise RuntimeError("the run ended without committing a batch")
    return first_commit, [p for p in query.recentProgress if p.numInputRows]


def _drain(batch: Any, _batch_id: int) -> None:
    batch.count()  # runs the plan, state included, without writing anywhere


def state_rows(progress: list[Any]) -> int:
    return sum(op.numRowsTotal for op in progress[-1].stateOperators) if progress else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000, help="state keys to build")
    parser.add_argument("--to", type=int, default=8, help="state partitions to move to")
    args = parser.parse_args(argv)
    load_before = record.load_average()
    with local_broker("streamctl-bench-state-") as bed:
        topic = "bench-state-in"
        ensure_topics(bed.bootstrap_servers, [TopicSpec(topic, partitions=2),
                                              TopicSpec(f"{topic}.dlq")])
        began = time.monotonic()
        preload(bed.bootstrap_servers, topic, args.keys)
        print(f"preloaded {args.keys} readings in {time.monotonic() - began:.0f} s", flush=True)
        config = bind(grouped(dict(
            bootstrap_servers=bed.bootstrap_servers, job=sensor_job.name, input_topic=topic,
            dlq_topic=f"{topic}.dlq", checkpoint_dir=str(bed.workdir / "built"),
            input_parallelism=2, state_partitions=FROM_PARTITIONS, task_slots=4,
            max_offsets_per_trigger=min(BUILD_BATCH, max(1, args.keys // 4)), metrics_port=0,
            spark_jars=",".join(str(p) for p in spark_kafka_jars()),
            settings=(("enrichment_cost_ms", 0.0), ("window_s", ONE_WINDOW_S),
                      ("watermark_s", ONE_WINDOW_S)))), sensor_job)
        spark = build_session(config, worker_path(sensor_job))
        try:
            began = time.monotonic()
            _, built = run(spark, config, FROM_PARTITIONS)
            build_s, keys = time.monotonic() - began, state_rows(built)
            print(f"built {keys} state rows in {build_s:.0f} s", flush=True)
            kept = changed(config, checkpoint_dir=str(bed.workdir / "kept"))
            shutil.copytree(config.storage.checkpoint_dir, kept.storage.checkpoint_dir)
            moved = repartition_state(spark, config.storage.checkpoint_dir, args.to)
            print(f"repartitioned {FROM_PARTITIONS} → {args.to} in {moved.duration_ms} ms",
                  flush=True)
            preload(bed.bootstrap_servers, topic, APPENDED, first=args.keys)
            restarts = [_restart(spark, c, n) for c, n in ((config, args.to),
                                                           (kept, FROM_PARTITIONS))]
        finally:
            spark.stop()
    _report(keys, build_s, moved.duration_ms, restarts, args, load_before, argv)
    return 0


def _restart(spark: Any, config: JobConfig, partitions: int) -> Restart:
    first_commit_s, progress = run(spark, config, partitions)
    restart = Restart(partitions, round(first_commit_s, 2),
                      round(progress[0].durationMs["triggerExecution"] / 1000, 2))
    print(f"restart at {partitions} state partitions: first commit {first_commit_s:.2f} s "
          f"after start", flush=True)
    return restart


def _report(keys: int, build_s: float, repartition_ms: int, restarts: list[Restart],
            args: argparse.Namespace, load_before: float, argv: list[str] | None) -> None:
    moved = restarts[0]
    print(f"\nstate rows {keys}; built in {build_s:.0f} s")
    print(f"{'step':<42} {'s':>6}")
    print(f"{f'offline repartition {FROM_PARTITIONS} → {args.to}':<42} "
          f"{repartition_ms / 1000:>6.2f}")
    for r in restarts:
        print(f"{f'restart at {r.state_partitions} → first commit':<42} "
              f"{r.start_to_first_commit_s:>6.2f}")
    print(f"{'repartition + restart (the pause less the quiesce)':<42} "
          f"{repartition_ms / 1000 + moved.start_to_first_commit_s:>6.2f}")
    record.write("state_repartition", {
        "keys": args.keys, "state_rows": keys, "build_s": round(build_s, 1),
        "from": FROM_PARTITIONS, "to": args.to, "repartition_ms": repartition_ms,
        "restarts": [asdict(r) for r in restarts]}, load_before, argv)


if __name__ == "__main__":
    raise SystemExit(main())
