"""Benchmark: the bundled job's throughput at several input parallelisms, side by side.

For each parallelism it preloads the same number of records into a fresh input topic, starts
the real job process (`streamctl job run`) against a local broker, and reads the job's own
metrics until every record is processed. Throughput counts batches after the first one with
rows (which carries Spark's warm-up) and divides their rows by the time from that first
batch's end to the last batch's end, so it is what a backlogged job sustains. It also reports
the time from starting the job process to its first committed batch (Spark start-up plus one
full batch of the preloaded backlog).

    .venv/bin/python -m bench.throughput --parallelism 2 4 8

prints a table and writes `bench/results/throughput.json`.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import record
from bench.bed import local_broker, process_env, produce_all
from schemas import SensorReading, TaskMetrics, codec_for
from streamctl.processes import start_child
from streamctl.stack.topics import TopicSpec, ensure_topics
from streamctl.tail import Tail


@dataclass(frozen=True)
class RunResult:
    parallelism: int
    records: int
    start_to_first_commit_s: float
    batches: int
    median_batch_s: float
    throughput_per_s: float


def preload(bootstrap: str, topic: str, records: int) -> None:
    """`records` readings of 50 sensors, a hundred per millisecond of event time."""
    now_ms = int(time.time() * 1000)
    produce_readings(bootstrap, topic, (
        SensorReading(f"sensor-{seq % 50:03d}", now_ms + seq // 100, 20.0, seq)
        for seq in range(records)))


def produce_readings(bootstrap: str, topic: str, readings: Iterable[SensorReading]) -> None:
    """Each reading to `topic`, keyed by its sensor, all delivered before it returns."""
    codec = codec_for(SensorReading)
    produce_all(bootstrap, topic, ((r.sensor_id, codec.encode(r)) for r in readings))


def run_one(bootstrap: str, parallelism: int, records: int, cost_ms: float,
            workdir: Path) -> RunResult:
    tag = f"p{parallelism}-{int(time.time())}"
    names = {k: f"bench-{tag}-{k}" for k in ("in", "out", "dlq", "metrics", "control", "acks")}
    ensure_topics(bootstrap, [TopicSpec(names["in"], partitions=2),
                              TopicSpec(names["out"], partitions=2),
                              *(TopicSpec(names[k]) for k in ("dlq", "metrics", "control",
                                                               "acks"))])
    preload(bootstrap, names["in"], records)
    tail = Tail(bootstrap, {names["metrics"]: TaskMetrics}, from_beginning=True)
    started = time.monotonic()
    job = start_child(f"job-{tag}", [
        "job", "run", "--job", "sensor-averages",
        "--query-id", f"bench-{tag}", "--input-topic", names["in"],
        "--output-topic", names["out"], "--dlq-topic", names["dlq"],
        "--metrics-topic", names["metrics"], "--control-topic", names["control"],
        "--ack-topic", names["acks"], "--checkpoint-dir", str(workdir / tag),
        "--input-parallelism", str(parallelism), "--set", f"enrichment_cost_ms={cost_ms}",
        "--trigger-interval-s", "1", "--metrics-port", "0",
    ], workdir, process_env(bootstrap))
    try:
        batches, first_commit_s = _collect(tail, job.alive, records, started)
    finally:
        job.stop()
        tail.close()
    return _summarise(parallelism, records, first_commit_s, batches)


def _collect(tail: Tail, alive: Callable[[], bool], records: int,
             started: float) -> tuple[list[TaskMetrics], float]:
    batches: list[TaskMetrics] = []
    first_commit_s = 0.0
    deadline = time.monotonic() + 600
    while sum(b.input_rows for b in batches) < records:
        if time.monotonic() > deadline or not alive():
            raise RuntimeError("the job stopped or took longer than 600 s; see its log")
        for _topic, m in tail.poll(0.5):
            assert isinstance(m, TaskMetrics)
            first_commit_s = first_commit_s or time.monotonic() - started
            if m.input_rows > 0:
                batches.append(m)
    return batches, first_commit_s


def _summarise(parallelism: int, records: int, first_commit_s: float,
               batches: list[TaskMetrics]) -> RunResult:
    if len(batches) < 3:
        raise RuntimeError(f"only {len(batches)} batches; preload more records")
    warm = batches[1:]
    span_s = (warm[-1].batch_end_ms - batches[0].batch_end_ms) / 1000
    durations = sorted(b.busy_ms / 1000 for b in warm)
    return RunResult(parallelism, records, round(first_commit_s, 1), len(batches),
                     round(durations[len(durations) // 2], 2),
                     round(sum(b.input_rows for b in warm) / span_s, 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parallelism", type=int, nargs="+", default=[2, 4, 8],
                        help="input parallelism values to measure")
    parser.add_argument("--records", type=int, default=16_000, help="records per run")
    parser.add_argument("--enrichment-cost-ms", type=float, default=5.0,
                        help="the job's simulated lookup latency per record")
    args = parser.parse_args()
    load_before = record.load_average()
    with local_broker() as bed:
        results = [run_one(bed.bootstrap_servers, p, args.records, args.enrichment_cost_ms,
                           bed.workdir) for p in args.parallelism]
    _report(results, args.enrichment_cost_ms, load_before)
    return 0


def _report(results: list[RunResult], cost_ms: float, load_before: float) -> None:
    base = results[0].throughput_per_s
    print(f"\njob throughput, enrichment cost {cost_ms} ms/record, 4000-record batches, "
          f"{platform.machine()} with 2 cores")
    print(f"{'parallelism':>11}  {'records/s':>9}  {'vs first':>8}  {'median batch s':>14}  "
          f"{'batches':>7}  {'start to 1st commit s':>21}")
    for r in results:
        print(f"{r.parallelism:>11}  {r.throughput_per_s:>9.0f}  "
              f"{r.throughput_per_s / base:>7.2f}x  {r.median_batch_s:>14.2f}  "
              f"{r.batches:>7}  {r.start_to_first_commit_s:>21.1f}")
    record.write("throughput", {"enrichment_cost_ms": cost_ms,
                                "runs": [asdict(r) for r in results]}, load_before)


if __name__ == "__main__":
    raise SystemExit(main())
