"""Benchmark: the fraud job's scoring rate at several state partitions, and repartition time.

The fraud job's I/O-bound scoring call runs in the tasks of its stateful operator, one per
state partition, so its capacity should grow with the state partitions even on 2 cores. For
each number of partitions this preloads the same card transactions into a fresh topic on a
local broker, runs the registered plan on them (availableNow, `--batches` batches, fresh
checkpoint, RocksDB state store) in one SparkSession and reports the median time of the
batches after the first (`triggerExecution`): the first opens a state store per partition and
carries that one-off cost. One unreported warm-up run comes first (Spark's and the Python
workers' start). It then repartitions the first checkpoint offline
to the last number and reports how long Spark took.

    .venv/bin/python -m bench.fraud_partitions --partitions 2 4 8 --records 4000 --cost-ms 10

prints a table and writes `bench/results/fraud_partitions.json`.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from bench import record
from bench.bed import local_broker, produce_all
from streamctl.cards import CardEvents
from streamctl.stack.connector import spark_kafka_jars
from streamctl.stack.topics import TopicSpec, ensure_topics
from streaming_jobs.config import changed, grouped


@dataclass(frozen=True)
class RunResult:
    state_partitions: int
    records_per_batch: int
    median_batch_s: float
    """Median over the batches after the first."""
    scored_per_s: float


def preload(bootstrap: str, topic: str, records: int, accounts: int) -> None:
    """`records` card transactions of `accounts` accounts, ten milliseconds apart."""
    import random

    from schemas import CardTransaction, codec_for

    codec, events, rng = codec_for(CardTransaction), CardEvents(accounts), random.Random(0)
    transactions = (events.make(rng, 1_700_000_000_000 + i * 10) for i in range(records))
    produce_all(bootstrap, topic, ((t.account_id, codec.encode(t)) for t in transactions))


def _drain(batch: Any, _batch_id: int) -> None:
    batch.count()  # runs the plan (scoring included) without writing anywhere


def run_once(spark: Any, config: Any, partitions: int) -> float:
    """Median seconds of the batches with rows after the first."""
    from streaming_jobs.jobs.fraud.job import job as fraud_job
    from streaming_jobs.runtime.kafka import DeadLetterFactory
    from streaming_jobs.runtime.query.plan import Plan

    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    plan = Plan(fraud_job)
    df = plan.build(spark, config.run, config.initial_state(),
                 DeadLetterFactory(config.bootstrap_servers, config.topics.dlq_topic))
    query = (df.writeStream.outputMode(plan.output_mode)
             .foreachBatch(_drain)
             .option("checkpointLocation", config.storage.checkpoint_dir)
             .trigger(availableNow=True).start())
    assert query.awaitTermination(600), "the run did not finish in 10 minutes"
    busy = [p.durationMs["triggerExecution"] for p in query.recentProgress if p.numInputRows]
    return statistics.median(busy[1:] or busy) / 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[2, 4, 8],
                        help="state partitions to compare")
    parser.add_argument("--records", type=int, default=4000, help="transactions per run")
    parser.add_argument("--batches", type=int, default=4, help="batches per run")
    parser.add_argument("--accounts", type=int, default=100, help="distinct accounts")
    parser.add_argument("--cost-ms", type=float, default=5.0,
                        help="scoring call latency per transaction")
    args = parser.parse_args(argv)
    load_before = record.load_average()
    from pyspark.sql import SparkSession

    from streaming_jobs.config import bind
    from streaming_jobs.jobs.fraud.job import job as fraud_job
    from streaming_jobs.runtime.checkpoint.state_repartition import repartition_state
    from streaming_jobs.runtime.query.session import STATE_STORE_SETTINGS, prepare_environment

    with local_broker("fraud-bench-") as bed:
        tmp, bootstrap = bed.workdir, bed.bootstrap_servers
        prepare_environment()
        builder = (SparkSession.builder.master("local[16]").appName("bench-fraud-partitions")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.jars", ",".join(str(j) for j in spark_kafka_jars())))
        for key, value in STATE_STORE_SETTINGS.items():  # as a job's session
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        try:
            results, first_cp = [], ""
            base = bind(grouped(dict(bootstrap_servers=bootstrap,
                                  job=fraud_job.name,
                                  max_offsets_per_trigger=max(1, args.records // args.batches),
                                  input_parallelism=4, metrics_port=0,
                                  settings=(("enrichment_cost_ms", args.cost_ms),
                                            ("watermark_s", 60)))), fraud_job)
            for n in [0, *args.partitions]:  # 0: the warm-up
                topic = f"bench-cards-{n}"
                records = args.records if n else 200
                ensure_topics(bootstrap, [TopicSpec(topic, partitions=4)], 30.0)
                preload(bootstrap, topic, records, args.accounts)
                config = changed(base, input_topic=topic, dlq_topic=f"{topic}.dlq",
                                 checkpoint_dir=f"{tmp}/cp-{n}")
                batch_s = run_once(spark, config, n or args.partitions[0])
                if not n:
                    continue
                first_cp = first_cp or config.storage.checkpoint_dir
                per_batch = base.initial.max_offsets_per_trigger
                results.append(RunResult(n, per_batch, round(batch_s, 2),
                                         round(per_batch / batch_s, 1)))
                print(f"state partitions {n:3d}: {per_batch} per batch, median {batch_s:6.2f} s "
                      f"= {per_batch / batch_s:7.1f} scored/s", flush=True)
            moved = repartition_state(spark, first_cp, args.partitions[-1])
            print(f"repartition {moved.old_partitions} -> {moved.new_partitions}: "
                  f"{moved.duration_ms} ms")
        finally:
            spark.stop()
    record.write("fraud_partitions", {
        "cost_ms": args.cost_ms, "runs": [asdict(r) for r in results],
        "repartition": {"from": moved.old_partitions, "to": moved.new_partitions,
                        "duration_ms": moved.duration_ms}}, load_before, argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
