"""Re-records the metrics traces under `tests/data/traces/` from real runs of the bundled job
(and, for a pipeline, the clickstream example's jobs).

One local broker (fresh state dir, free ports) for all scenarios; per scenario fresh topics,
the real job processes (`streamctl job run`, trigger 2 s; the bundled job at an enrichment
cost of 5 ms/record) at a fixed size, and the load generator (`streamctl.loadgen`) playing
the scenario's rate profile. No controller runs: each trace shows the jobs' natural response
to the load. When the load is over, the metrics topic between the load's start and end is
copied with the same reader as `streamctl controller record --from/--to`, and written as a
trace whose header notes say what was played (rates, times in seconds from the trace start,
the kill time).

Scenarios run one after the other (the machine has two cores):

    .venv/bin/python -m bench.record_traces                    # all of them
    .venv/bin/python -m bench.record_traces step_up lost_instance

Each takes its duration plus about a minute (Spark start-up, 30 s of warm-up load).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bed import local_broker, process_env
from controller.kafka.traces import read_metrics
from controller.replay.trace import BadRecord, TraceWriter
from schemas import TaskMetrics
from streamctl.ledger import AckedLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.processes import Child, start_child
from streamctl.profiles import RateProfile
from streamctl.stack.topics import TopicSpec, ensure_topics
from streamctl.tail import Tail

OUT_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
TRIGGER_S = 2
COST_MS = 5


def compressed_day(t_s: float, rng: random.Random) -> float:
    """`DAY`'s rate at `t_s`, ±10 % noise: night at its low, the peak half a period in."""
    low, high, period_s = DAY
    phase = (t_s % period_s) / period_s
    return (low + (high - low) * (1 - math.cos(2 * math.pi * phase)) / 2) * (1 + rng.gauss(0, 0.1))


DAY = (80.0, 560.0, 120.0)
"""(night, peak, period_s) of the repeating day: past parallelism 2's ~340/s for the middle
third of each day."""


@dataclass(frozen=True)
class Stage:
    """One job of a scenario; a stage after the first reads the one before's output."""

    job: str
    options: tuple[str, ...]
    """`job run` options besides topics, checkpoint and the common ones (its size, its cost)."""


SENSOR = Stage("sensor-averages", ("--set", f"enrichment_cost_ms={COST_MS}"))


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    parallelism: int
    duration_s: float
    profile: RateProfile | None = None
    segments: tuple[Callable[[float, random.Random], float], float] | None = None
    """(rate at a time, segment_s): a new constant rate every segment_s, the function of the
    segment's start (and a seeded random source)."""
    hot_key_share: float = 0.0
    kill_at_s: float | None = None
    warm_up_s: float = 30
    """Load at the starting rate before the trace starts (a warm job, not a cold one)."""
    stages: tuple[Stage, ...] = (SENSOR,)
    """The jobs, in pipeline order; the first takes `parallelism` units."""
    event_type: str = "sensor"
    """What the load generator writes (`streamctl.loadgen.LoadSpec.event_type`)."""
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def base_rate(self) -> float:
        """The rate the scenario starts at, which the warm-up plays."""
        if self.profile is not None:
            return self.profile.rate_at(0)
        assert self.segments is not None
        rate, _ = self.segments
        return rate(0.0, random.Random(0))

    def query_id(self, stage: int) -> str:
        """The scenario's name for a lone job (as every trace before pipelines had), else
        `<name>-<job>`."""
        return self.name if len(self.stages) == 1 else f"{self.name}-{self.stages[stage].job}"


CLICK_COST_MS = 10
"""The clickstream example's middle job: ~150 clicks/s at 2 state partitions (as in
`tests/e2e/test_pipeline.py`); its last job's check costs half."""
CLICK_PIPELINE = (
    Stage("click-enrich", ("--set", "lookup_cost_ms=0.1")),
    Stage("click-sessions", ("--state-partitions", "2", "--max-state-partitions", "16",
                             "--set", f"model_cost_ms={CLICK_COST_MS}",
                             "--set", "watermark_s=600")),
    Stage("click-alerts", ("--input-parallelism", "2",
                           "--set", f"check_cost_ms={CLICK_COST_MS / 2}")),
)

SCENARIOS = (
    Scenario("step_up", "120/s, stepping to 700/s at 20 s; parallelism 2 (~340/s)", 2, 90,
             RateProfile("step", 120, 700, start_s=20), notes={"step_at_s": 20}),
    # Eight cold Python workers on two cores leave a backlog that takes a minute to clear.
    Scenario("step_down", "600/s, stepping to 100/s at 30 s; parallelism 8 (~1000/s)", 8, 120,
             RateProfile("step", 600, 100, start_s=30), warm_up_s=90,
             notes={"step_at_s": 30}),
    Scenario("ramp", "100/s ramping to 900/s between 15 s and 75 s; parallelism 2", 2, 100,
             RateProfile("ramp", 100, 900, start_s=15, end_s=75),
             notes={"ramp_from_s": 15, "ramp_to_s": 75}),
    Scenario("spike", "120/s with a 1200/s spike from 20 s to 32 s; parallelism 2", 2, 100,
             RateProfile("spike", 120, 1200, start_s=20, end_s=32),
             notes={"spike_from_s": 20, "spike_to_s": 32}),
    Scenario("skewed_keys", "450/s with 90 % of records on one key; parallelism 2", 2, 90,
             RateProfile("constant", 450), hot_key_share=0.9),
    Scenario("lost_instance", "200/s; the job is killed with SIGKILL at 45 s; parallelism 2",
             2, 100, RateProfile("constant", 200), kill_at_s=45),
    Scenario("noisy_steady", "a new rate in [120, 280]/s every 5 s; parallelism 2", 2, 100,
             segments=(lambda _t, rng: rng.uniform(120, 280), 5)),
    Scenario("repeating_day",
             "a day of 120 s played three times: 80/s at night to 560/s at its peak, ±10 % "
             "noise, a new rate every 2 s; parallelism 2 (~340/s)", 2, 3 * DAY[2],
             segments=(compressed_day, 2),
             notes={"night_per_s": DAY[0], "peak_per_s": DAY[1], "period_s": DAY[2]}),
    Scenario("noisy_downstream",
             "clicks through the clickstream example's three jobs: 50/s, stepping to 300/s "
             "(twice the middle job's ~150/s) at 40 s; the last job gets what the middle one "
             "can send", 2, 140, RateProfile("step", 50, 300, start_s=40),
             stages=CLICK_PIPELINE, event_type="click", notes={"step_at_s": 40}),
)


def _topics(bootstrap: str, s: Scenario) -> dict[str, str]:
    """The scenario's topics: `in`, one between each two stages (`stage1` …), `out`, and the
    dead-letter and control-plane ones."""
    tag = f"{s.name}-{int(time.time())}"
    data = ["in", *(f"stage{i}" for i in range(1, len(s.stages))), "out"]
    names = {k: f"trace-{tag}-{k}" for k in (*data, "dlq", "metrics", "control", "acks")}
    ensure_topics(bootstrap, [*(TopicSpec(names[k], partitions=2) for k in data),
                              *(TopicSpec(names[k]) for k in ("dlq", "metrics", "control",
                                                               "acks"))])
    return names


def _start_jobs(bootstrap: str, s: Scenario, topics: dict[str, str],
                workdir: Path) -> list[Child]:
    data = ["in", *(f"stage{i}" for i in range(1, len(s.stages))), "out"]
    jobs: list[Child] = []
    try:
        for i, stage in enumerate(s.stages):
            size = ("--input-parallelism", str(s.parallelism)) if i == 0 else ()
            jobs.append(start_child(f"job-{s.query_id(i)}", [
                "job", "run", "--job", stage.job, "--query-id", s.query_id(i),
                "--input-topic", topics[data[i]], "--output-topic", topics[data[i + 1]],
                "--dlq-topic", topics["dlq"], "--metrics-topic", topics["metrics"],
                "--control-topic", topics["control"], "--ack-topic", topics["acks"],
                "--checkpoint-dir", str(workdir / s.query_id(i)), *size, *stage.options,
                "--trigger-interval-s", str(TRIGGER_S), "--metrics-port", "0",
                "--max-shed-fraction", "0",
            ], workdir, process_env(bootstrap)))
    except BaseException:
        for job in jobs:
            job.stop()
        raise
    return jobs


def _await_first_metrics(bootstrap: str, topic: str, s: Scenario, jobs: list[Child],
                         timeout_s: float) -> None:
    """Until every stage's job has reported (its Spark start-up done)."""
    tail = Tail(bootstrap, {topic: TaskMetrics}, from_beginning=True)
    waiting = {s.query_id(i) for i in range(len(s.stages))}
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for job in jobs:
                if not job.alive():
                    raise RuntimeError(f"a job died before its first metrics:\n{job.log_tail()}")
            waiting -= {m.query_id for _, m in tail.poll(0.5) if isinstance(m, TaskMetrics)}
            if not waiting:
                return
        raise RuntimeError(f"no metrics from {sorted(waiting)} within {timeout_s:.0f} s")
    finally:
        tail.close()


@dataclass
class Delivered(AckedLedger[Any]):
    """A ledger for any event type that only counts: a trace accounts for no record."""

    def _keep(self, _record: Any) -> None:
        pass


def _spec(bootstrap: str, s: Scenario, topic: str, profile: RateProfile, duration_s: float,
          start_seq: int = 0) -> LoadSpec:
    return LoadSpec(bootstrap, topic, profile, duration_s, hot_key_share=s.hot_key_share,
                    start_seq=start_seq, event_type=s.event_type)


def _load(bootstrap: str, s: Scenario, topic: str, stop: threading.Event) -> Callable[[], None]:
    def play() -> None:
        ledger = Delivered()
        if s.profile is not None:
            run_load(_spec(bootstrap, s, topic, s.profile, s.duration_s), ledger, stop)
            return
        assert s.segments is not None
        rate_at, segment_s = s.segments
        rng, seq, started = random.Random(7), 0, time.monotonic()
        while not stop.is_set() and (elapsed := time.monotonic() - started) < s.duration_s:
            rate = rate_at(elapsed, rng)
            run_load(_spec(bootstrap, s, topic, RateProfile("constant", rate), segment_s, seq),
                     ledger, stop)
            seq += int(rate * segment_s) + 1
    return play


def record(bootstrap: str, s: Scenario, workdir: Path) -> Path:
    topics = _topics(bootstrap, s)
    jobs = _start_jobs(bootstrap, s, topics, workdir)
    try:
        _await_first_metrics(bootstrap, topics["metrics"], s, jobs, 240)
        # A long-running job, not a cold one: Spark's first batches (JIT, Python workers) are
        # several times slower and would look like a backlog to any controller.
        run_load(_spec(bootstrap, s, topics["in"], RateProfile("constant", s.base_rate),
                       s.warm_up_s, start_seq=10**9), Delivered())
        stop = threading.Event()
        load = threading.Thread(target=_load(bootstrap, s, topics["in"], stop), daemon=True)
        from_ms = time.time_ns() // 1_000_000
        load.start()
        if s.kill_at_s is not None:
            time.sleep(s.kill_at_s)
            os.killpg(jobs[0].process.pid, signal.SIGKILL)  # its own session: job and its JVM
        load.join(s.duration_s + 60)
        to_ms = time.time_ns() // 1_000_000
    finally:
        for job in jobs:
            job.stop()
    return _write(bootstrap, s, topics["metrics"], from_ms, to_ms)


def _write(bootstrap: str, s: Scenario, topic: str, from_ms: int, to_ms: int) -> Path:
    path = OUT_DIR / f"{s.name}.jsonl"
    notes: dict[str, Any] = {
        "scenario": s.name, "what": s.what, "input_parallelism": s.parallelism,
        "jobs": [f"{stage.job} {' '.join(stage.options)}" for stage in s.stages],
        "duration_s": s.duration_s, "trigger_interval_s": TRIGGER_S,
        "enrichment_cost_ms": COST_MS, "hot_key_share": s.hot_key_share,
        "warm_up_s": s.warm_up_s,
        "recorded_by": "python -m bench.record_traces", **s.notes}
    if s.kill_at_s is not None:
        notes["killed_at_s"] = s.kill_at_s
    with path.open("w") as out:
        writer = TraceWriter(out, topic=topic, from_ms=from_ms, notes=notes)
        bad: list[BadRecord] = []
        for entry in read_metrics(bootstrap, topic, from_ms, to_ms, bad.append):
            writer.write(entry)
        for b in bad:
            writer.bad(b)
        writer.close(to_ms)
    print(f"{s.name}: {writer.records} records, {len(bad)} bad, "
          f"{path.stat().st_size // 1024} KB -> {path}", flush=True)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help=f"scenarios to record (default: all of {[s.name for s in SCENARIOS]})")
    args = parser.parse_args()
    unknown = set(args.scenarios) - {s.name for s in SCENARIOS}
    if unknown:
        parser.error(f"unknown scenarios: {sorted(unknown)}")
    chosen = [s for s in SCENARIOS if not args.scenarios or s.name in args.scenarios]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with local_broker("streamctl-traces-") as bed:
        for scenario in chosen:
            print(f"{scenario.name}: {scenario.what}", flush=True)
            record(bed.bootstrap_servers, scenario, bed.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
