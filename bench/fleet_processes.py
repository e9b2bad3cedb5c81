"""Benchmark: `controller run` processes under a synthetic fleet on the real broker, what they
cost and how fast they answer.

`python -m bench.fleet_processes` starts a local broker and, for each row, 1, 2 or 4
`controller run` processes with their defaults on fresh topics (four shards; the query limit
raised to the fleet's size, so that what lies past the default is measured too), and drives
them with N synthetic queries of P input partitions, published from this process as jobs would
publish them: a batch a second per query (a 1 s trigger), all reading one input topic of P
partitions to which this process produces `rate_per_s(P)` records/s, so the broker's end
offsets the controllers probe agree with what the batches report. Each query reports a batch
cap (`maxOffsetsPerTrigger`, `CAP_SHARE` of what arrives in a trigger). The queries keep up
(busy half of each trigger, reading all that arrived) while the controllers fill their windows
and while they are measured; then what each record costs rises `BEHIND_COST`-fold in every
query at once, and each runs as Spark would: its batches run back to back past the trigger,
each reading all that waits up to the cap (prorated over the partitions as Spark's Kafka
source does), so they grow to the cap within a batch or two and the backlog grows behind
them. Each query answers its control tuples with applied acks; from its first tuple on it
keeps up at once, whatever the tuple gave (nothing after it is measured).

Per row:
- CPU per cycle: each controller process's own CPU time (`/proc`) over the measured span,
  divided into 0.5 s cycles (the default poll timeout and probe interval); the busiest
  instance's, per query, and as a share of one core;
- memory per query: the largest resident-set growth of an instance from leading no query to a
  full window of every query;
- metrics bytes per query per second, and the share of triggers the fleet published on time
  (below 1 it was short of CPU itself, and the controllers had less to read than jobs send);
- metrics in → tuple out: from the publication of a query's first batch behind to its tuple's
  `issued_at_ms` (the processes share the machine's clock), p50 and p99 over the queries that
  got one within `DECIDE_S`, and how many did: the model's confirmation (a few batches) plus
  whatever the controller's own backlog adds; and the units its knob tuple gave (after an
  executors tuple where the task slots bound, the knob's that follows) against those the load
  needs;
- with several instances, a takeover: kill -9 of one instance → the last takeover record by
  which the others lead all of its shards.

What it leaves out: the jobs' own work (no job runs), and a topic per query (one input topic
serves all, so the broker sampling is one topic's end offsets whatever N; `bench.fleet` times
the cycle without any broker). The fleet, this process's producer and every controller share
the machine's 2 cores.

    .venv/bin/python -m bench.fleet_processes

prints a line per row and writes `bench/results/fleet_processes.json` (`bench.report` renders
it into `docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Producer

from bench import record
from bench.bed import local_broker, loop_env
from controller.core.parallelism import units
from controller.core.shards import leaders
from schemas import (
    Ack,
    ControlTuple,
    Decision,
    Outcome,
    Role,
    SourcePartition,
    TaskMetrics,
    codec_for,
)
from schemas.knobs import EXECUTORS, INPUT_PARALLELISM
from schemas.records import TAKEOVER
from streamctl.loadgen import producer_config
from streamctl.processes import Child, start_child, stop_all
from streamctl.stack.topics import TopicSpec, delete_topics, ensure_topics
from streamctl.tail import Tail

CYCLE_S = 0.5
"""The default poll timeout and probe interval: one cycle at the default cadence."""
TRIGGER_MS = 1000
MIN_RATE_PER_S = 400
RATE_PER_PARTITION_S = 4
"""At least this many records a second on each partition (`rate_per_s`): a batch cap is
prorated over partitions with each one's share rounded, and below a record each it would round
most partitions up to one."""
CAP_SHARE = 1.5
"""Each query's batch cap, of what arrives in a trigger: a query that keeps up reads below it."""
BEHIND_COST = 4
"""How many times a record costs once the queries fall behind: a heavier record or a slower
dependency, beyond what the units can do at the load."""
PARALLELISM = 4
"""Each query's input parallelism until a tuple changes it (below its partitions: Spark reads
with a task per partition, as many at once as there are task slots)."""
EXECUTOR_CORES = 4
FIRST_EXECUTORS = 2
"""Each query runs on a cluster: `FIRST_EXECUTORS` executors of `EXECUTOR_CORES` cores at
first (its task slots: as many as the tasks of 8 partitions, so none is spare for the
controller to release), at most `MAX_EXECUTORS`; a query with more partitions than task slots
grows only with more executors."""
MAX_EXECUTORS = 64

SHARDS = 4
INPUT_CONFIG = {"index.interval.bytes": str(1 << 20)}
"""The input topic's: an index entry per MiB of a partition, not per 4 KiB. At 4 records a
second each, all 1 024 partitions reached their first index entry at once a minute in, and
this machine's broker stalled every producer for 30 s writing them, in the middle of a row."""
DECIDE_S = 90.0
"""How long the queries behind are given to get their tuples."""


@dataclass(frozen=True)
class Row:
    queries: int
    partitions: int
    instances: int


ROWS = tuple(Row(queries, partitions, instances)
             for partitions, fleets in ((8, (10, 100, 1000, 2000)), (1024, (10, 100)))
             for queries in fleets for instances in (1, 2, 4))
"""Past 100 queries of 1 024 partitions this machine cannot publish for the fleet (about 6 KB
a query a second of metrics, and encoding them) nor hold an instance's windows (about 15 MiB a
query)."""
QUICK = (Row(10, 8, 1), Row(100, 8, 2))


def rate_per_s(partitions: int) -> int:
    """Records a second the fleet produces into an input topic of `partitions` partitions."""
    return max(MIN_RATE_PER_S, RATE_PER_PARTITION_S * partitions)


def units_needed(partitions: int) -> int:
    """Units the load needs, busy all the time, once the queries fall behind: those the query
    ran, busy half of each trigger before."""
    running = units(INPUT_PARALLELISM, PARALLELISM, partitions, FIRST_EXECUTORS * EXECUTOR_CORES)
    return running * BEHIND_COST // 2


@dataclass(frozen=True)
class _Batch:
    """A batch of a query behind: planned at `start_ms` against the end offsets `latest`, it
    reads from `before` to `read`, busy `busy_ms`."""

    start_ms: int
    before: list[int]
    read: list[int]
    latest: list[int]
    busy_ms: int


@dataclass
class _Query:
    """What one synthetic query has read and runs at."""

    processed: list[int]
    parallelism: int = PARALLELISM
    task_slots: int = FIRST_EXECUTORS * EXECUTOR_CORES
    epoch: int = 0
    behind: bool = False
    running: _Batch | None = None
    """The batch a query behind runs now (None: it keeps up, a batch each trigger)."""
    behind_since_ms: int | None = None
    """When its first batch behind was published."""
    tuple_at_ms: int | None = None
    """When the controller issued its first tuple after it fell behind."""
    asked: int | None = None
    """The units the first tuple after it that set the knob gave."""


class SyntheticFleet:
    """N queries on one input topic: produces to the topic, publishes each query's batch every
    trigger and answers each control tuple with an applied ack (a thread each)."""

    def __init__(self, bootstrap: str, topics: dict[str, str], row: Row,
                 parallelism: int = PARALLELISM) -> None:
        """`topics`: the input topic (`in`, of `row.partitions` partitions) and the
        controllers' `metrics`, `control` and `acks` topics."""
        self._bootstrap, self._topics, self._row = bootstrap, topics, row
        self._producer = Producer(producer_config(bootstrap))
        self._lock = threading.Lock()
        self._per_trigger = rate_per_s(row.partitions) * TRIGGER_MS // 1000
        self._cap = round(self._per_trigger * CAP_SHARE)
        self._behind_ms_per_record = BEHIND_COST * TRIGGER_MS / 2 / self._per_trigger
        """A query that keeps up is busy half its trigger for what arrives in one."""
        self._produced = [0] * row.partitions
        self._planned: list[int] = [0] * row.partitions
        """The input's end offsets when the batches now running were planned."""
        self._read_before = self._planned
        """Where the batches before them ended: a query that keeps up holds this very list."""
        self._queries = {f"q{i}": _Query(self._read_before, parallelism)
                         for i in range(row.queries)}
        self.tuples = 0
        """Control tuples answered."""
        self._stop = threading.Event()
        self._batch = 0
        self._planned_at_ms = int(time.time() * 1000)
        self.metrics_bytes = 0
        self.ticks = self.late_ticks = 0
        """Triggers the fleet published its batches at, and of them those that took longer
        than a trigger (the fleet itself short of CPU: fewer batches than jobs would send)."""
        self._error: BaseException | None = None
        self._threads = [threading.Thread(target=self._guarded, args=(self._run,), daemon=True),
                         threading.Thread(target=self._guarded, args=(self._answer,),
                                          daemon=True)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def check(self) -> None:
        """Raise what stopped one of the fleet's threads, if anything did."""
        if self._error is not None:
            raise RuntimeError("the synthetic fleet stopped") from self._error

    def fall_behind(self) -> None:
        with self._lock:
            for query in self._queries.values():
                query.behind = True

    def asked(self) -> list[int]:
        """The units each query's first knob tuple after falling behind gave."""
        with self._lock:
            return [q.asked for q in self._queries.values() if q.asked is not None]

    def latencies_ms(self) -> list[int]:
        """Per query that got a tuple after falling behind: first batch behind → the tuple."""
        with self._lock:
            return [q.tuple_at_ms - q.behind_since_ms for q in self._queries.values()
                    if q.tuple_at_ms is not None and q.behind_since_ms is not None]

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread.ident is not None:  # started
                thread.join(30)
        self._producer.flush(30)

    def _guarded(self, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as exc:  # kept for `check`: a dead fleet must not be measured
            self._error = exc

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            self._produce(self._per_trigger)
            self._publish_batches()
            self.ticks += 1
            next_tick += TRIGGER_MS / 1000
            if time.monotonic() > next_tick:
                self.late_ticks += 1
                next_tick = time.monotonic()
            self._stop.wait(max(0.0, next_tick - time.monotonic()))

    def _produce(self, records: int) -> None:
        partitions = self._row.partitions
        for n in range(records):
            partition = (self._batch * records + n) % partitions
            self._producer.produce(self._topics["in"], b"x", partition=partition)
            self._produced[partition] += 1
        self._producer.flush(30)

    def _publish_batches(self) -> None:
        """Each query's batch that ended by now: one a trigger from a query that keeps up,
        planned at the last tick against the end offsets of then; from a query behind, the
        one it ran since its last, the next starting at once."""
        now = int(time.time() * 1000)
        start_ms, planned, topic = self._planned_at_ms, self._planned, self._topics["in"]
        produced = list(self._produced)
        encode = codec_for(TaskMetrics).encode
        # What every query that keeps up read: one tuple, shared (it is the same for all).
        steady = tuple(SourcePartition(topic, p, self._read_before[p], planned[p], planned[p])
                       for p in range(self._row.partitions))
        with self._lock:
            for query_id, query in self._queries.items():
                batch = (self._run_behind(query, now, start_ms, planned, produced)
                         if query.behind else
                         _Batch(start_ms, query.processed, planned, planned, TRIGGER_MS // 2))
                if batch is None:  # behind, and its batch still runs
                    continue
                partitions = steady if batch.before is self._read_before and not query.behind \
                    else tuple(SourcePartition(topic, p, batch.before[p], batch.read[p],
                                               batch.latest[p])
                               for p in range(self._row.partitions))
                query.processed = batch.read
                rows = sum(batch.read) - sum(batch.before)
                sample = TaskMetrics(
                    query_id=query_id, instance_id=f"{query_id}-1", role=Role.ACTIVE,
                    config_epoch=query.epoch, batch_id=self._batch,
                    batch_start_ms=batch.start_ms, batch_end_ms=batch.start_ms + batch.busy_ms,
                    trigger_interval_ms=TRIGGER_MS, input_rows=rows, output_rows=rows,
                    busy_ms=batch.busy_ms, partitions=partitions,
                    input_parallelism=query.parallelism, state_partitions=4,
                    task_slots=query.task_slots, executor_cores=EXECUTOR_CORES,
                    max_executors=MAX_EXECUTORS,
                    max_offsets_per_trigger=self._cap, source_topics=(topic,),
                    sink_topics=(f"out-{query_id}",))
                payload = encode(sample)
                self.metrics_bytes += len(payload)
                self._producer.produce(self._topics["metrics"], payload, key=query_id.encode())
                if query.behind and query.behind_since_ms is None:
                    query.behind_since_ms = now
        self._producer.flush(30)
        self._read_before, self._planned = planned, produced
        self._planned_at_ms = now
        self._batch += 1

    def _run_behind(self, query: _Query, now_ms: int, planned_at_ms: int, planned: list[int],
                    produced: list[int]) -> _Batch | None:
        """The batch `query` (behind) finished by `now_ms`, if it did, and its next one,
        started when it ended (back to back, as Spark starts a batch that overran its
        trigger) against the end offsets of then (between `planned`, those of the last tick
        at `planned_at_ms`, and `produced`, those of now). Its first is the batch planned at
        the last tick, run at the new cost."""
        if query.running is None:
            query.running = self._behind_batch(planned_at_ms, query.processed, planned)
        finished = query.running
        end_ms = finished.start_ms + finished.busy_ms
        if end_ms > now_ms:
            return None
        share = (end_ms - planned_at_ms) / max(1, now_ms - planned_at_ms)
        latest = [then + int((now - then) * share) for then, now in zip(planned, produced,
                                                                         strict=True)]
        query.running = self._behind_batch(end_ms, finished.read, latest)
        return finished

    def _behind_batch(self, start_ms: int, before: list[int], latest: list[int]) -> _Batch:
        read = capped(before, latest, self._cap)
        busy_ms = round((sum(read) - sum(before)) * self._behind_ms_per_record)
        return _Batch(start_ms, before, read, latest, max(1, busy_ms))

    def _answer(self) -> None:
        tail = Tail(self._bootstrap, {self._topics["control"]: ControlTuple},
                    from_beginning=True)
        encode = codec_for(Ack).encode
        try:
            while not self._stop.is_set():
                for _topic, got in tail.poll(0.5):
                    if isinstance(got, ControlTuple) and got.query_id in self._queries:
                        self._producer.produce(self._topics["acks"], encode(self._apply(got)))
                self._producer.flush(30)
        finally:
            tail.close()

    def _apply(self, control: ControlTuple) -> Ack:
        with self._lock:
            self.tuples += 1
            query = self._queries[control.query_id]
            for setting in control.settings:
                if setting.parameter == INPUT_PARALLELISM:
                    query.parallelism = int(setting.value)
                elif setting.parameter == EXECUTORS:
                    query.task_slots = int(setting.value) * EXECUTOR_CORES
            query.epoch = control.epoch
            query.running = None  # keeping up again from the next trigger
            if (query.behind and query.tuple_at_ms is None and query.behind_since_ms is not None
                    and control.issued_at_ms >= query.behind_since_ms):
                query.tuple_at_ms = control.issued_at_ms
            if query.tuple_at_ms is not None and query.asked is None and any(
                    s.parameter == INPUT_PARALLELISM for s in control.settings):
                # The knob's tuple (after an executors one, the one that follows it once they
                # run): the units the controller sized for.
                query.asked = units(INPUT_PARALLELISM, query.parallelism, self._row.partitions,
                                    query.task_slots)
            query.behind = False
        return Ack(control_id=control.control_id, query_id=control.query_id,
                   instance_id=f"{control.query_id}-1", epoch=control.epoch,
                   outcome=Outcome.APPLIED, detail="synthetic", pause_ms=0,
                   acked_at_ms=int(time.time() * 1000))


def capped(before: Sequence[int], latest: Sequence[int], cap: int) -> list[int]:
    """The offsets a batch reads to from `before` when `latest` is where each partition ends
    and at most `cap` records may be read, as Spark's Kafka source prorates its
    `maxOffsetsPerTrigger`: by what each partition has waiting, its share rounded down, or up
    where it is under one record (so a batch over many thin partitions may pass the cap)."""
    waiting = [end - start for start, end in zip(before, latest, strict=True)]
    total = sum(waiting)
    if total <= cap:
        return list(latest)
    read = []
    for start, size, end in zip(before, waiting, latest, strict=True):
        share = cap * (size / total)  # in Spark's order: limit * (size / total)
        read.append(min(end, start + (math.ceil(share) if share < 1 else math.floor(share))))
    return read


@dataclass(frozen=True)
class Figures:
    queries: int
    partitions: int
    instances: int
    rate_per_s: int
    """Records a second into the input topic (`rate_per_s`)."""
    cpu_ms_per_cycle: float
    """The busiest instance's CPU over the measured span, per 0.5 s cycle."""
    cpu_ms_per_query_per_cycle: float
    core_share: float
    """The busiest instance's CPU over the span's wall time: above 1, it cannot keep up."""
    memory_kib_per_query: float
    metrics_bytes_per_query_per_s: float
    fleet_on_time: float
    """Of the measured span's triggers, the share the fleet published on time: below 1, it
    was short of CPU itself, and the controllers got fewer batches than jobs would send."""
    decided: int
    """Queries that got a tuple within `DECIDE_S` of falling behind."""
    tuple_p50_s: float | None
    tuple_p99_s: float | None
    units_needed: int
    units_asked_p50: float | None
    """The units the knob's tuple (after an executors one, the one that follows it) gave,
    median: the load behind needs `units_needed` busy all the time."""
    takeover_s: float | None = None
    """Kill -9 of one instance → the others lead all of its shards (several instances)."""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


class Bed:
    """Fresh topics, the controllers on them, and their decisions as they arrive."""

    def __init__(self, bootstrap: str, workdir: Path, row: Row) -> None:
        tag = uuid.uuid4().hex[:8]
        kinds = ("in", "metrics", "control", "acks", "decisions", "lease")
        self.topics = {k: f"bench-fleet-{tag}-{k}" for k in kinds}
        # The metrics topic one partition per shard: each instance reads only its own.
        counts = {"in": row.partitions, "lease": SHARDS, "metrics": SHARDS}
        ensure_topics(bootstrap, [TopicSpec(name, partitions=counts.get(kind, 1),
                                            config=INPUT_CONFIG if kind == "in" else {})
                                  for kind, name in self.topics.items()])
        t = self.topics
        self.env = loop_env(bootstrap, t, STREAMCTL_CONTROLLER_GROUP_ID=f"bench-fleet-{tag}")
        self.workdir, self.row, self._bootstrap = workdir / tag, row, bootstrap
        self.controllers: list[Child] = []
        self.takeovers: list[Decision] = []
        self.checks: list[Callable[[], None]] = []
        """Called while waiting: each raises when something the bed relies on failed."""
        self._tail = Tail(bootstrap, {t["decisions"]: Decision}, from_beginning=True)

    def start_controllers(self) -> None:
        for n in range(self.row.instances):
            self.controllers.append(start_child(f"c{n}", [
                "controller", "run", "--metrics-port", "0", "--instance-id", f"c{n}",
                "--max-queries", str(self.row.queries)], self.workdir, self.env))
        names = {c.name for c in self.controllers}
        self.wait(lambda: set(self.leaders().values()) == names
                  and len(self.leaders()) == SHARDS, 120, "the shards divided among all")

    def leaders(self) -> dict[int, str]:
        return leaders(self.takeovers)[0]

    def poll(self) -> None:
        for _topic, got in self._tail.poll(0.2):
            if isinstance(got, Decision) and got.action == TAKEOVER:
                self.takeovers.append(got)

    def wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        if not self.done_within(done, timeout_s):
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")

    def done_within(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Read the decisions until `done()` or `timeout_s` passed; whether it was done. Every
        controller must stay up meanwhile."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                return False
            for child in self.controllers:
                if not child.alive():
                    raise RuntimeError(f"{child.name} died:\n{child.log_tail()}")
            for check in self.checks:
                check()
            self.poll()
        return True

    def spend(self, seconds: float) -> None:
        """Let `seconds` pass, reading the decisions meanwhile."""
        until = time.monotonic() + seconds
        self.done_within(lambda: time.monotonic() >= until, seconds + 5)

    def close(self) -> None:
        """Stops the controllers and deletes the row's topics: a broker left holding every
        earlier row's thousands of partitions would spend on them the CPU the next row
        measures."""
        stop_all(self.controllers)
        self._tail.close()
        delete_topics(self._bootstrap, list(self.topics.values()))


def measure(bootstrap: str, workdir: Path, row: Row, warm_s: float,
            measured_s: float) -> Figures:
    with ExitStack() as cleanup:
        bed = Bed(bootstrap, workdir, row)
        cleanup.callback(bed.close)
        fleet = SyntheticFleet(bootstrap, bed.topics, row)
        cleanup.callback(fleet.close)
        bed.checks.append(fleet.check)
        bed.start_controllers()
        pids = [c.process.pid for c in bed.controllers]
        rss_before = [_rss_kib(pid) for pid in pids]
        fleet.start()
        bed.spend(warm_s)
        cpu_before, bytes_before = [_cpu_s(pid) for pid in pids], fleet.metrics_bytes
        ticks_before, late_before = fleet.ticks, fleet.late_ticks
        started = time.monotonic()
        bed.spend(measured_s)
        elapsed = time.monotonic() - started
        busiest_cpu_s = max(_cpu_s(pid) - before for pid, before in zip(pids, cpu_before,
                                                                          strict=True))
        rss_growth_kib = max(_rss_kib(pid) - before for pid, before in zip(pids, rss_before,
                                                                           strict=True))
        metrics_bytes = fleet.metrics_bytes - bytes_before
        ticks, late = fleet.ticks - ticks_before, fleet.late_ticks - late_before
        fleet.fall_behind()
        bed.done_within(lambda: len(fleet.latencies_ms()) == len(fleet.asked()) == row.queries,
                        DECIDE_S)
        latencies = sorted(ms / 1000 for ms in fleet.latencies_ms())
        takeover = _takeover(bed) if row.instances > 1 else None
        fleet.check()
    cycles = elapsed / CYCLE_S
    return Figures(
        queries=row.queries, partitions=row.partitions, instances=row.instances,
        rate_per_s=rate_per_s(row.partitions), units_needed=units_needed(row.partitions),
        cpu_ms_per_cycle=round(busiest_cpu_s * 1000 / cycles, 2),
        cpu_ms_per_query_per_cycle=round(busiest_cpu_s * 1000 / cycles / row.queries, 3),
        core_share=round(busiest_cpu_s / elapsed, 3),
        memory_kib_per_query=round(rss_growth_kib / row.queries, 1),
        metrics_bytes_per_query_per_s=round(metrics_bytes / elapsed / row.queries),
        fleet_on_time=round((ticks - late) / max(ticks, 1), 2),
        decided=len(latencies), tuple_p50_s=_quantile(latencies, 0.5),
        tuple_p99_s=_quantile(latencies, 0.99),
        units_asked_p50=_quantile(sorted(map(float, fleet.asked())), 0.5), takeover_s=takeover)


def _takeover(bed: Bed) -> float:
    """Kill -9 of the first instance → the first takeover record by which the others lead
    every shard it held."""
    killed = bed.controllers.pop(0)
    held = [shard for shard, leader in bed.leaders().items() if leader == killed.name]
    killed_ms = int(time.time() * 1000)
    killed.kill()
    killed.stop()  # closes its log

    def moved_at() -> int | None:
        for n, taken in enumerate(bed.takeovers):
            now_leading = leaders(bed.takeovers[:n + 1])[0]
            if taken.decided_at_ms > killed_ms and all(
                    now_leading.get(shard) != killed.name for shard in held):
                return taken.decided_at_ms
        return None
    bed.wait(lambda: moved_at() is not None, 120, f"{killed.name}'s shards taken over")
    moved_ms = moved_at()
    assert moved_ms is not None  # what the wait waited for
    return round((moved_ms - killed_ms) / 1000, 1)


def _quantile(ordered: Sequence[float], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_processes",
                                     description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer and smaller fleets")
    parser.add_argument("--warm-s", type=float, default=60.0,
                        help="seconds of batches that fill the windows before measuring")
    parser.add_argument("--measured-s", type=float, default=30.0,
                        help="seconds over which the controllers' CPU is measured")
    args = parser.parse_args(argv)
    load_before = record.load_average()
    rows = []
    with local_broker("streamctl-bench-fleet-") as broker:
        for row in QUICK if args.quick else ROWS:
            figures = measure(broker.bootstrap_servers, broker.workdir, row, args.warm_s,
                              args.measured_s)
            rows.append(figures)
            print(f"{row.queries:>5} × {row.partitions:<5} on {row.instances}: "
                  f"{figures.cpu_ms_per_cycle:8.1f} ms/cycle ({figures.core_share:.0%} of a "
                  f"core), {figures.memory_kib_per_query:.0f} KiB/query, "
                  f"{figures.metrics_bytes_per_query_per_s} B/query/s, fleet on time "
                  f"{figures.fleet_on_time:.0%}, decided "
                  f"{figures.decided}/{row.queries}, p50 {figures.tuple_p50_s} s, p99 "
                  f"{figures.tuple_p99_s} s, units {figures.units_asked_p50}, takeover "
                  f"{figures.takeover_s} s", flush=True)
    record.write("fleet_processes", {
        "cycle_s": CYCLE_S, "trigger_ms": TRIGGER_MS, "cap_share": CAP_SHARE,
        "behind_cost": BEHIND_COST,
        "shards": SHARDS, "decide_s": DECIDE_S, "warm_s": args.warm_s,
        "measured_s": args.measured_s, "rows": [asdict(r) for r in rows],
    }, load_before, None if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
