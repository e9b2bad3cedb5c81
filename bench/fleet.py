"""What one controller instance costs per query: the real cycle over a synthetic fleet.

`python -m bench.fleet` drives the production `controller.loop.cycle.ControlLoop` (collect →
settle → decide → act, with its observers as `controller run` has them: Prometheus and the
live page's timeline; its garbage collector tuned as `controller run` tunes it,
`controller.app.collect_garbage_rarely`) over the in-memory ports and a fake clock, for N
queries of P input partitions each: every query publishes one batch a second (a 1 s trigger)
at a steady load it keeps up with, and the broker's end offsets, which grow with every
record, answer every probe.
The clock steps by the default cycle (0.5 s), so each step is one cycle at the default cadence
and the figures are the controller's own work, whatever the machine does around it:

- CPU per cycle (the process's CPU clock around `run_once`, median and p99 over the measured
  cycles), per query, and as a share of the 0.5 s cycle;
- memory per query (the growth of the heap, by `tracemalloc`, from an empty controller to one
  with a full window of every query, on a separate run of at most 20 of them);
- bytes per query per second of the metrics topic (the Avro records the jobs publish);
- one fleet divided among 1, 2 and 4 instances (`SHARDS` shards, `MemoryLeadership`, the
  metrics topic read as one of a partition per shard: each instance reads only its shards'
  queries, as `controller run` does on such a topic): the busiest instance's CPU per cycle,
  and how many queries got exactly one control tuple once every query fell behind (all: each
  decided once, by one instance).

What it leaves out: the broker round trips (`bench.fleet` reads no socket) and the Kafka
client's decoding cost outside `poll`'s decode. Owns the synthetic fleet and the figures;
`bench.report` renders them into docs/benchmarks.md. Neighbours: `controller.loop.fakes`.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from bench import record
from controller.app import collect_garbage_rarely
from controller.explain.page import Timeline
from controller.explain.prom import ControllerMetrics
from controller.loop.cycle import ControlLoop, Ports
from controller.loop.fakes import (
    FakeClock,
    MemoryAckSource,
    MemoryBus,
    MemoryControlSink,
    MemoryDecisionLog,
    MemoryEndOffsets,
    MemoryLeadership,
    MemoryLease,
    MemoryMetricsSource,
)
from controller.loop.ports import Observers
from controller.settings import ControllerSettings, ModelSettings
from schemas import Role, SourcePartition, TaskMetrics, codec_for

CYCLE_S = 0.5
"""The default poll timeout and probe interval: one cycle at the default cadence."""
TRIGGER_MS = 1000
RATE_PER_PARTITION = 50
"""Records a second on each partition: light, so every query keeps up and holds."""
BUSY_SHARE = 0.5
"""Of each trigger interval the batch is busy: within the policy's band, no decision due."""


@dataclass(frozen=True)
class Fleet:
    queries: int
    partitions: int


class SyntheticFleet:
    """N steady queries; `publish(now_ms)` writes every batch that ended by `now_ms` and sets
    the end offsets the broker would report."""

    def __init__(self, fleet: Fleet, bus: MemoryBus, offsets: MemoryEndOffsets,
                 start_ms: int) -> None:
        self._fleet, self._bus, self._offsets = fleet, bus, offsets
        self._start_ms = start_ms
        self._next_end_ms = start_ms + TRIGGER_MS
        self._batch = 0
        self.bytes_published = 0
        self._arrived_extra = 0
        self._behind = False

    def fall_behind(self) -> None:
        """From now on records arrive at twice the rate every query processes, its batches
        running back to back: every query needs scaling up."""
        self._behind = True

    def publish(self, now_ms: int) -> None:
        while self._next_end_ms <= now_ms:
            self._publish_batch(self._next_end_ms)
            self._next_end_ms += TRIGGER_MS
            self._batch += 1
        # The records arrive steadily, not once a batch: every probe sees them grow.
        per_batch = RATE_PER_PARTITION * TRIGGER_MS // 1000
        arrived = int(per_batch * ((now_ms - self._start_ms) / TRIGGER_MS + 1))
        for q in range(self._fleet.queries):
            for p in range(self._fleet.partitions):
                self._offsets.ends[(f"in-{q}", p)] = arrived + self._arrived_extra

    def _publish_batch(self, end_ms: int) -> None:
        codec = codec_for(TaskMetrics)
        per_batch = RATE_PER_PARTITION * TRIGGER_MS // 1000
        start, end = self._batch * per_batch, (self._batch + 1) * per_batch
        if self._behind:
            self._arrived_extra += per_batch
        latest = end + self._arrived_extra
        busy_ms = TRIGGER_MS if self._behind else int(TRIGGER_MS * BUSY_SHARE)
        for q in range(self._fleet.queries):
            topic = f"in-{q}"
            partitions = tuple(SourcePartition(topic, p, start, end, latest)
                               for p in range(self._fleet.partitions))
            rows = per_batch * self._fleet.partitions
            sample = TaskMetrics(
                query_id=f"q{q}", instance_id=f"q{q}-1", role=Role.ACTIVE, config_epoch=0,
                batch_id=self._batch, batch_start_ms=end_ms - TRIGGER_MS, batch_end_ms=end_ms,
                trigger_interval_ms=TRIGGER_MS, input_rows=rows, output_rows=rows,
                busy_ms=busy_ms, partitions=partitions,
                input_parallelism=4, state_partitions=4, task_slots=16,
                source_topics=(topic,), sink_topics=(f"out-{q}",))
            payload = codec.encode(sample)
            self.bytes_published += len(payload)
            self._bus.metrics.append(payload, key=sample.query_id, stamp_ms=end_ms)


@dataclass(frozen=True)
class FleetFigures:
    queries: int
    partitions: int
    cycles: int
    cpu_ms_per_cycle_mean: float
    """The mean, not the median: at a 1 s trigger every other 0.5 s cycle reads no batch."""
    cpu_ms_per_cycle_p99: float
    cpu_ms_per_query_per_cycle: float
    cycle_share: float
    """CPU per cycle over the 0.5 s cycle: above 1, one instance cannot keep up."""
    memory_kib_per_query: float
    metrics_bytes_per_query_per_s: float
    decisions: int
    """Decision records written (verdicts that changed kind: advice and holds included; an
    overloaded query's at least every `overload_record_interval_s`)."""


def measure(fleet: Fleet, warm_s: float, measured_s: float) -> FleetFigures:
    """Fill every query's window for `warm_s`, then time `measured_s` of cycles; memory from
    a separate run of at most `MEMORY_QUERIES` of the same queries (tracemalloc slows every
    allocation, so it never runs while CPU is timed)."""
    bus, loop, source, clock = _controller(fleet)
    _cycles(loop, source, clock, warm_s)
    published_before = source.bytes_published
    cpu_ms = _cycles(loop, source, clock, measured_s)
    mean = statistics.fmean(cpu_ms)
    return FleetFigures(
        queries=fleet.queries, partitions=fleet.partitions, cycles=len(cpu_ms),
        cpu_ms_per_cycle_mean=round(mean, 2),
        cpu_ms_per_cycle_p99=round(statistics.quantiles(cpu_ms, n=100)[98], 2),
        cpu_ms_per_query_per_cycle=round(mean / fleet.queries, 3),
        cycle_share=round(mean / (CYCLE_S * 1000), 3),
        memory_kib_per_query=memory_per_query_kib(
            Fleet(min(fleet.queries, MEMORY_QUERIES), fleet.partitions), warm_s),
        metrics_bytes_per_query_per_s=round(
            (source.bytes_published - published_before) / fleet.queries / measured_s),
        decisions=len(bus.written_decisions()))


MEMORY_QUERIES = 20


def memory_per_query_kib(fleet: Fleet, warm_s: float) -> float:
    """Heap growth from an empty controller to one with a full window of every query."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        bus, loop, source, clock = _controller(fleet)
        _cycles(loop, source, clock, warm_s)
        bus.metrics.clear()
        gc.collect()
        return round((tracemalloc.get_traced_memory()[0] - before) / 1024 / fleet.queries, 1)
    finally:
        tracemalloc.stop()


def _controller(fleet: Fleet) -> tuple[MemoryBus, ControlLoop, SyntheticFleet, FakeClock]:
    bus, clock, offsets = MemoryBus(), FakeClock(), MemoryEndOffsets()
    [loop] = _instances(fleet, bus, clock, offsets, instances=1, shards=None)
    return bus, loop, SyntheticFleet(fleet, bus, offsets, clock.now_ms()), clock


def _instances(fleet: Fleet, bus: MemoryBus, clock: FakeClock, offsets: MemoryEndOffsets,
               instances: int, shards: int | None) -> list[ControlLoop]:
    """`instances` controllers on one bus; with `shards`, dividing them round robin (each
    instance its own Prometheus and live page, as `controller run` has them)."""
    lease = MemoryLease(shards=shards or 1)
    lease.holders = {s: f"c{s % instances}" for s in range(lease.shards)}
    loops = []
    for i in range(instances):
        leadership = (None if shards is None else
                      MemoryLeadership(lease, f"c{i}", bus, issuer=ControllerSettings().issuer))
        guard = leadership.guard if leadership is not None else _unguarded
        settings = ControllerSettings(instance_id=f"c{i}",
                                      model=ModelSettings(max_queries=fleet.queries))
        loops.append(ControlLoop(settings, Ports(
            # No clock on the source: an empty poll must not move the clock every instance
            # shares (the cycles move it).
            # With shards, one partition per shard: each instance reads only its own.
            metrics=MemoryMetricsSource(bus.metrics, read_back_s=None if shards is None
                                        else settings.model.window_s),
            control=MemoryControlSink(bus.control, guard, decisions=bus.decisions),
            acks=MemoryAckSource(bus.acks), decisions=MemoryDecisionLog(bus.decisions, guard),
            clock=clock, offsets=offsets, leadership=leadership, observer=Observers(
                ControllerMetrics(CollectorRegistry()), Timeline(clock.now_ms)))))
    return loops


def _unguarded(query_id: str) -> None:
    pass


def _cycles(loop: ControlLoop, source: SyntheticFleet, clock: FakeClock,
            seconds: float) -> list[float]:
    """`seconds` of cycles; the CPU milliseconds of each."""
    return _shared_cycles([loop], source, clock, seconds)[0]


def _shared_cycles(loops: Sequence[ControlLoop], source: SyntheticFleet, clock: FakeClock,
                   seconds: float) -> list[list[float]]:
    """`seconds` of cycles of every instance in turn; the CPU milliseconds of each cycle,
    per instance."""
    cpu_ms: list[list[float]] = [[] for _ in loops]
    for _ in range(int(seconds / CYCLE_S)):
        clock.advance(CYCLE_S)
        source.publish(clock.now_ms())
        for loop, spent in zip(loops, cpu_ms, strict=True):
            started = time.process_time()
            loop.run_once()
            spent.append((time.process_time() - started) * 1000)
    return cpu_ms


@dataclass(frozen=True)
class SharedFigures:
    """One fleet divided among several instances, beside one instance leading it all."""

    queries: int
    partitions: int
    instances: int
    shards: int
    cpu_ms_per_cycle_mean: float
    """Of the busiest instance: its mean cycle."""
    decided_once: int
    """Queries that got exactly one control tuple once every query fell behind (all of them:
    each decided once, by one instance)."""


SHARDS = 8


def measure_shared(fleet: Fleet, instances: int, warm_s: float,
                   measured_s: float) -> SharedFigures:
    """`instances` controllers dividing `SHARDS` shards of `fleet`; then every query falls
    behind, and each must get exactly one tuple, from its shard's leader."""
    bus, clock, offsets = MemoryBus(), FakeClock(), MemoryEndOffsets()
    loops = _instances(fleet, bus, clock, offsets, instances, SHARDS)
    source = SyntheticFleet(fleet, bus, offsets, clock.now_ms())
    _shared_cycles(loops, source, clock, warm_s)
    cpu_ms = _shared_cycles(loops, source, clock, measured_s)
    busiest = max(statistics.fmean(spent) for spent in cpu_ms)
    source.fall_behind()
    _shared_cycles(loops, source, clock, 20.0)
    sent = Counter(c.query_id for c in bus.sent_controls())
    return SharedFigures(
        queries=fleet.queries, partitions=fleet.partitions, instances=instances,
        shards=SHARDS, cpu_ms_per_cycle_mean=round(busiest, 2),
        decided_once=sum(1 for q in range(fleet.queries) if sent[f"q{q}"] == 1))


def sustainable_queries(rows: Sequence[FleetFigures], partitions: int) -> int:
    """The most queries of `partitions` partitions one instance kept within half its cycle
    (the other half is the broker's and the poll's), by linear extrapolation of the largest
    measured fleet's cost per query."""
    measured = [r for r in rows if r.partitions == partitions]
    largest = max(measured, key=lambda r: r.queries)
    return int((CYCLE_S * 1000 / 2) / largest.cpu_ms_per_query_per_cycle)


FLEETS = [Fleet(10, 8), Fleet(100, 8), Fleet(300, 8), Fleet(1000, 8), Fleet(10, 128),
          Fleet(10, 1024)]
QUICK = [Fleet(10, 8), Fleet(100, 8), Fleet(10, 128)]
SHARED, SHARED_QUICK = Fleet(300, 8), Fleet(40, 8)
"""The fleet divided among 1, 2 and 4 instances."""
INSTANCES = (1, 2, 4)


COLLECTOR_FLEET, COLLECTOR_RUNS = Fleet(300, 8), 2
"""The fleet timed with Python's default collector and with the controller's, side by side."""


def measure_apart(fleet: Fleet, warm_s: float, measured_s: float,
                  collector: str = "tuned") -> FleetFigures:
    """`measure` in a fresh process: measured after the others in one process, 10 × 1 024
    cost up to twice what it does alone, by what they left in the process."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.fleet", "--collector", collector,
         "--one", f"{fleet.queries}x{fleet.partitions}", "--warm-s", str(warm_s),
         "--measured-s", str(measured_s)],
        check=True, capture_output=True, text=True).stdout
    return FleetFigures(**json.loads(out.splitlines()[-1]))


def compare_collectors(fleet: Fleet, runs: int, warm_s: float,
                       measured_s: float) -> dict[str, Any]:
    """CPU per query per cycle of `fleet` with Python's default garbage collector and with
    `collect_garbage_rarely`'s, each in a fresh process (the collector is the process's),
    alternating `runs` times: a ratio the machine's drift over the bench does not bias."""
    spent: dict[str, list[float]] = {"default": [], "tuned": []}
    for _ in range(runs):
        for collector, times in spent.items():
            times.append(measure_apart(fleet, warm_s, measured_s,
                                       collector).cpu_ms_per_query_per_cycle)
    default, tuned = (statistics.fmean(spent[c]) for c in ("default", "tuned"))
    return {"queries": fleet.queries, "partitions": fleet.partitions, "runs": runs,
            "default_ms": round(default, 3), "tuned_ms": round(tuned, 3),
            "ratio": round(tuned / default, 2)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer and smaller fleets")
    parser.add_argument("--warm-s", type=float, default=60.0,
                        help="simulated seconds that fill the window before measuring")
    parser.add_argument("--measured-s", type=float, default=30.0,
                        help="simulated seconds of cycles timed")
    parser.add_argument("--one", metavar="QxP", help=argparse.SUPPRESS)
    parser.add_argument("--collector", choices=("default", "tuned"), default="tuned",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.collector == "tuned":
        collect_garbage_rarely()
    if args.one:  # one fleet, its figures as JSON: a run of `compare_collectors`
        queries, partitions = map(int, args.one.split("x"))
        one = measure(Fleet(queries, partitions), args.warm_s, args.measured_s)
        print(json.dumps(asdict(one)))
        return 0
    load_before = record.load_average()
    rows = []
    for fleet in (QUICK if args.quick else FLEETS):
        figures = measure_apart(fleet, args.warm_s, args.measured_s, args.collector)
        rows.append(figures)
        print(f"{fleet.queries:>5} × {fleet.partitions:<5} {figures.cpu_ms_per_cycle_mean:9.2f} ms"
              f"/cycle ({figures.cycle_share:.0%} of the cycle), "
              f"{figures.cpu_ms_per_query_per_cycle:.3f} ms/query, "
              f"{figures.memory_kib_per_query:.0f} KiB/query, "
              f"{figures.metrics_bytes_per_query_per_s} B/query/s, "
              f"{figures.decisions} decisions", flush=True)
    shared_fleet = SHARED_QUICK if args.quick else SHARED
    shared = []
    for instances in INSTANCES:
        divided = measure_shared(shared_fleet, instances, args.warm_s, args.measured_s)
        shared.append(divided)
        print(f"{shared_fleet.queries} × {shared_fleet.partitions} on {instances} instance(s): "
              f"busiest {divided.cpu_ms_per_cycle_mean:.2f} ms/cycle, {divided.decided_once} "
              f"of {divided.queries} queries decided once", flush=True)
    collectors = compare_collectors(COLLECTOR_FLEET, 1 if args.quick else COLLECTOR_RUNS,
                                    args.warm_s, args.measured_s)
    print(f"{COLLECTOR_FLEET.queries} × {COLLECTOR_FLEET.partitions}, side by side: "
          f"{collectors['default_ms']:.3f} ms/query with Python's default collector, "
          f"{collectors['tuned_ms']:.3f} with the controller's ({collectors['ratio']}×)",
          flush=True)
    payload: dict[str, Any] = {
        "cycle_s": CYCLE_S, "trigger_ms": TRIGGER_MS, "collectors": collectors,
        "rows": [asdict(r) for r in rows],
        "sustainable_queries_8_partitions": sustainable_queries(rows, 8),
        "shared": [asdict(r) for r in shared],
    }
    record.write("fleet", payload, load_before, None if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
