"""Re-records the metrics traces under `tests/data/traces/` from real runs of the bundled job.

One local broker (fresh state dir, free ports) for all scenarios; per scenario fresh topics,
the real job process (`streamctl job run`, trigger 2 s, enrichment cost 5 ms/record) at a
fixed input parallelism, and the load generator (`streamctl.loadgen`) playing the scenario's
rate profile. No controller runs: each trace shows the job's natural response to the load.
When the load is over, the metrics topic between the load's start and end is copied with the
same reader as `streamctl controller record --from/--to`, and written as a trace whose header
notes say what was played (rates, times in seconds from the trace start, the kill time).

Scenarios run one after the other (the machine has two cores):

    .venv/bin/python -m bench.record_traces                    # all of them
    .venv/bin/python -m bench.record_traces step_up lost_instance

Each takes its duration plus about a minute (Spark start-up, 30 s of warm-up load).
"""

from __future__ import annotations

import argparse
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
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child
from streamctl.profiles import RateProfile
from streamctl.stack.topics import TopicSpec, ensure_topics
from streamctl.tail import Tail

OUT_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"
TRIGGER_S = 2
COST_MS = 5


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    parallelism: int
    duration_s: float
    profile: RateProfile | None = None
    noisy: tuple[float, float, float] | None = None
    """(low, high, segment_s): a new uniformly drawn constant rate every segment_s."""
    hot_key_share: float = 0.0
    kill_at_s: float | None = None
    warm_up_s: float = 30
    """Load at the starting rate before the trace starts (a warm job, not a cold one)."""
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def base_rate(self) -> float:
        """The rate the scenario starts at, which the warm-up plays."""
        if self.profile is not None:
            return self.profile.rate_at(0)
        assert self.noisy is not None
        return (self.noisy[0] + self.noisy[1]) / 2


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
             noisy=(120, 280, 5)),
)


def _topics(bootstrap: str, name: str) -> dict[str, str]:
    tag = f"{name}-{int(time.time())}"
    names = {k: f"trace-{tag}-{k}" for k in ("in", "out", "dlq", "metrics", "control", "acks")}
    ensure_topics(bootstrap, [TopicSpec(names["in"], partitions=2),
                              TopicSpec(names["out"], partitions=2),
                              *(TopicSpec(names[k]) for k in ("dlq", "metrics", "control",
                                                               "acks"))])
    return names


def _start_job(bootstrap: str, s: Scenario, topics: dict[str, str], workdir: Path) -> Child:
    return start_child(f"job-{s.name}", [
        "job", "run", "--job", "sensor-averages",
        "--query-id", s.name, "--input-topic", topics["in"],
        "--output-topic", topics["out"], "--dlq-topic", topics["dlq"],
        "--metrics-topic", topics["metrics"], "--control-topic", topics["control"],
        "--ack-topic", topics["acks"], "--checkpoint-dir", str(workdir / s.name),
        "--input-parallelism", str(s.parallelism), "--set", f"enrichment_cost_ms={COST_MS}",
        "--trigger-interval-s", str(TRIGGER_S), "--metrics-port", "0",
        "--max-shed-fraction", "0",
    ], workdir, process_env(bootstrap))


def _await_first_metrics(bootstrap: str, topic: str, job: Child, timeout_s: float) -> None:
    tail = Tail(bootstrap, {topic: TaskMetrics}, from_beginning=True)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not job.alive():
                raise RuntimeError(f"the job died before its first metrics:\n{job.log_tail()}")
            if tail.poll(0.5):
                return
        raise RuntimeError(f"no metrics from the job within {timeout_s:.0f} s")
    finally:
        tail.close()


def _load(bootstrap: str, s: Scenario, topic: str, stop: threading.Event) -> Callable[[], None]:
    def play() -> None:
        ledger = Ledger(10_000)
        if s.profile is not None:
            run_load(LoadSpec(bootstrap, topic, s.profile, s.duration_s,
                              hot_key_share=s.hot_key_share), ledger, stop)
            return
        assert s.noisy is not None
        low, high, segment_s = s.noisy
        rng, seq, started = random.Random(7), 0, time.monotonic()
        while not stop.is_set() and time.monotonic() - started < s.duration_s:
            rate = rng.uniform(low, high)
            run_load(LoadSpec(bootstrap, topic, RateProfile("constant", rate), segment_s,
                              start_seq=seq), ledger, stop)
            seq += int(rate * segment_s) + 1
    return play


def record(bootstrap: str, s: Scenario, workdir: Path) -> Path:
    topics = _topics(bootstrap, s.name)
    job = _start_job(bootstrap, s, topics, workdir)
    try:
        _await_first_metrics(bootstrap, topics["metrics"], job, 240)
        # A long-running job, not a cold one: Spark's first batches (JIT, Python workers) are
        # several times slower and would look like a backlog to any controller.
        run_load(LoadSpec(bootstrap, topics["in"], RateProfile("constant", s.base_rate),
                          s.warm_up_s, hot_key_share=s.hot_key_share, start_seq=10**9),
                 Ledger(10_000))
        stop = threading.Event()
        load = threading.Thread(target=_load(bootstrap, s, topics["in"], stop), daemon=True)
        from_ms = time.time_ns() // 1_000_000
        load.start()
        if s.kill_at_s is not None:
            time.sleep(s.kill_at_s)
            os.killpg(job.process.pid, signal.SIGKILL)  # its own session: job and its JVM
        load.join(s.duration_s + 60)
        to_ms = time.time_ns() // 1_000_000
    finally:
        job.stop()
    return _write(bootstrap, s, topics["metrics"], from_ms, to_ms)


def _write(bootstrap: str, s: Scenario, topic: str, from_ms: int, to_ms: int) -> Path:
    path = OUT_DIR / f"{s.name}.jsonl"
    notes: dict[str, Any] = {
        "scenario": s.name, "what": s.what, "input_parallelism": s.parallelism,
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
