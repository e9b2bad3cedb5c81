"""Benchmark: where a restarted query's first batch spends its time (issue 12, fast restarts).

Each run builds a fresh SparkSession (local[16], as the job's), runs the sensor job's plan
(`Plan.build`: Kafka source, decode, the job's builder; its exactly-once sink behind an open
gate) at input parallelism 2 over a preloaded backlog for three batches, stops it, and starts
it again from its checkpoint, the way a reconfiguration restarts a query:

- same:  at parallelism 2 again (the Python workers it needs exist);
- cold:  at parallelism 16 (14 Python workers to fork and to import the job's modules);
- warm:  at parallelism 16, after `worker_pool.warm` started 16 workers per Python operator
         of the plan (2: the decode step and the job's mapInArrow) while the old query still
         ran, what the runtime now does before a restart that adds tasks.

For each it reports, from Spark's own progress of the restarted query, how long its first
batch took and how (`durationMs`: planning the offsets, the query plan, executing the batch
with its sink), beside the second batch (warm, same size) and the time from `start()` to the
first commit.

    .venv/bin/python -m bench.restart --runs 3

prints a table and writes `bench/results/restart.json`; `docs/restarts.md` discusses it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench import record
from bench.bed import local_broker
from bench.overhead import config, start_bare
from bench.throughput import preload
from streamctl.stack.topics import TopicSpec, ensure_topics
from streaming_jobs.config import JobConfig, changed
from streaming_jobs.jobs.sensor_averages import job as sensor_job
from streaming_jobs.loading import worker_path
from streaming_jobs.runtime.query import worker_pool
from streaming_jobs.runtime.query.session import build_session

BATCH_CAP = 1500
COST_MS = 5.0
TASK_SLOTS = 16
SCENARIOS = {"same": (2, False), "cold": (16, False), "warm": (16, True)}
"""Per scenario: the restarted query's parallelism, and whether workers are warmed first."""
PHASES = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit",
          "commitOffsets")
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Restart:
    scenario: str
    start_to_first_commit_s: float
    first_batch_s: float
    second_batch_s: float
    first_batch_phases_ms: dict[str, int]
    warm_s: float | None
    """How long warming the workers took (before the stop; not in the restart)."""


def run(bootstrap: str, topic: str, workdir: Any, scenario: str, n: int) -> Restart:
    parallelism, warm = SCENARIOS[scenario]
    cfg = changed(config(bootstrap, topic, f"{scenario}-{n}", workdir, COST_MS),
                  task_slots=TASK_SLOTS, trigger_interval_s=1.0,
                  max_offsets_per_trigger=BATCH_CAP)
    spark = build_session(cfg, worker_path(sensor_job))
    try:
        query, sink, steps = _start(spark, cfg)
        _await_batches(query, 3)
        warmed = (worker_pool.warm(spark, parallelism, steps,
                                   worker_pool.modules_of(sensor_job)).seconds
                  if warm else None)
        query.stop()
        sink.close()
        started = time.monotonic()
        query, sink, _ = _start(spark, changed(cfg, input_parallelism=parallelism))
        try:
            _await_batches(query, 1)
            first_commit_s = time.monotonic() - started
            first, second = _await_batches(query, 2)
        finally:
            query.stop()
            sink.close()
    finally:
        spark.stop()
    return Restart(scenario, round(first_commit_s, 2),
                   first["durationMs"]["triggerExecution"] / 1000,
                   second["durationMs"]["triggerExecution"] / 1000,
                   {k: int(first["durationMs"].get(k, 0)) for k in PHASES},
                   None if warmed is None else round(warmed, 2))


def _start(spark: Any, cfg: JobConfig) -> tuple[Any, Any, int]:
    query, sink, frame = start_bare(spark, cfg)
    return query, sink, worker_pool.python_steps(frame)


def _await_batches(query: Any, count: int) -> list[dict[str, Any]]:
    """The query's first `count` batches with rows, once it has run them (polled every
    50 ms)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        done = sorted((p for p in query.recentProgress if p["numInputRows"] > 0),
                      key=lambda p: p["batchId"])
        if len(done) >= count:
            return done[:count]
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} batches in {TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def summary(runs: list[Restart]) -> list[dict[str, Any]]:
    rows = []
    for name in SCENARIOS:
        mine = [r for r in runs if r.scenario == name]
        if not mine:
            continue
        med = {k: round(statistics.median(getattr(r, k) for r in mine), 2)
               for k in ("start_to_first_commit_s", "first_batch_s", "second_batch_s")}
        phases = {k: int(statistics.median(r.first_batch_phases_ms[k] for r in mine))
                  for k in PHASES}
        warmed = [r.warm_s for r in mine if r.warm_s is not None]
        rows.append({"scenario": name, "runs": len(mine), **med, "phases_ms": phases,
                     "warm_s": round(statistics.median(warmed), 2) if warmed else None})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs of each scenario")
    args = parser.parse_args()
    load_before = record.load_average()
    runs: list[Restart] = []
    with local_broker("streamctl-bench-restart-") as bed:
        topic = "bench-restart-in"
        ensure_topics(bed.bootstrap_servers, [TopicSpec(topic, partitions=2)])
        preload(bed.bootstrap_servers, topic, BATCH_CAP * 6)
        for n in range(args.runs):
            for name in SCENARIOS:
                found = run(bed.bootstrap_servers, topic, bed.workdir, name, n)
                print(f"  {found}", flush=True)
                runs.append(found)
    rows = summary(runs)
    print(f"\n{'restart':<8} {'start→commit s':>14} {'1st batch s':>11} {'2nd batch s':>11}  "
          f"first batch's phases (ms)")
    for row in rows:
        phases = ", ".join(f"{k} {v}" for k, v in row["phases_ms"].items() if v)
        print(f"{row['scenario']:<8} {row['start_to_first_commit_s']:>14} "
              f"{row['first_batch_s']:>11} {row['second_batch_s']:>11}  {phases}")
    record.write("restart", {"runs": args.runs, "batch_cap": BATCH_CAP, "cost_ms": COST_MS,
                             "summary": rows, "all_runs": [asdict(r) for r in runs]},
                 load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
