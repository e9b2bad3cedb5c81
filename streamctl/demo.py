"""`streamctl demo`: the whole closed loop on one machine, narrated in the terminal.

It starts (or reuses) the local Kafka broker, recreates the demo topics, starts the job and the
controller as child processes, waits for the job's first metrics, then drives a load that
steps up so the job falls behind. Every few seconds it prints the input rate, arrival and
processing rates, lag, batch time and parallelism; decisions and acks are printed as they
happen. It ends by itself after `--duration-s` (or on Ctrl-C), stops every process it started
and prints a summary with the figures worth remembering.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from schemas import Ack, Decision, Outcome, TaskMetrics
from stack import defaults
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.tail import Tail
from streamctl.view import HEADER, QueryView, status_line

QUERY_ID = "sensor-averages"


@dataclass(frozen=True)
class DemoSettings:
    """Knobs of the demo run; defaults tell the story in about two and a half minutes."""

    duration_s: float = 150.0
    base_rate_per_s: float = 150.0
    peak_rate_per_s: float = 900.0
    step_at_s: float = 30.0
    enrichment_cost_ms: float = 5.0
    input_parallelism: int = 2
    port: int = 9092
    status_every_s: float = 3.0
    ready_timeout_s: float = 120.0


@dataclass(frozen=True)
class DemoTopics:
    """The default topics of the local stack, which the demo recreates on every run."""

    input: str = defaults.INPUT_TOPIC
    output: str = defaults.OUTPUT_TOPIC
    dlq: str = defaults.DEAD_LETTER_TOPIC
    metrics: str = defaults.METRICS_TOPIC
    control: str = defaults.CONTROL_TOPIC
    acks: str = defaults.ACKS_TOPIC
    decisions: str = defaults.DECISIONS_TOPIC
    state: str = defaults.STATE_TOPIC


def run_demo(settings: DemoSettings) -> int:
    state_dir = defaults.default_state_dir()
    with _sigterm_as_interrupt(), ExitStack() as cleanup:
        bootstrap = _start_broker(settings, state_dir, cleanup)
        topics = DemoTopics()
        _recreate_topics(bootstrap, topics)
        demo_dir = state_dir / "demo"
        shutil.rmtree(demo_dir / "checkpoints", ignore_errors=True)
        tail = Tail(bootstrap, {topics.metrics: TaskMetrics, topics.acks: Ack,
                                topics.decisions: Decision})
        cleanup.callback(tail.close)
        children = _start_children(settings, bootstrap, topics, demo_dir)
        cleanup.callback(stop_all, children)
        return Narrator(settings, bootstrap, topics, tail, children).run()
    return 1


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a supervisor, `timeout`, `kill`) takes the same path as Ctrl-C, so the demo
    always stops what it started: its children run in their own sessions and would
    otherwise outlive it."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _start_broker(settings: DemoSettings, state_dir: Path, cleanup: ExitStack) -> str:
    from stack.broker import LocalBroker

    broker = LocalBroker(state_dir=state_dir, port=settings.port)
    started = time.monotonic()
    if broker.start(timeout_s=90):
        cleanup.callback(broker.stop)
        print(f"broker: Kafka ready on {broker.bootstrap_servers} "
              f"in {time.monotonic() - started:.1f} s")
    else:
        print(f"broker: reusing the running local broker on {broker.bootstrap_servers}")
    return broker.bootstrap_servers


def _recreate_topics(bootstrap: str, topics: DemoTopics) -> None:
    """Fresh topics every run, so a demo never replays an older run's data or decisions."""
    from stack.topics import delete_topics, ensure_topics

    names = set(vars(topics).values())
    specs = [spec for spec in defaults.DEFAULT_TOPICS if spec.name in names]
    delete_topics(bootstrap, [s.name for s in specs])
    ensure_topics(bootstrap, specs)


def _start_children(settings: DemoSettings, bootstrap: str, topics: DemoTopics,
                    demo_dir: Path) -> list[Child]:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": bootstrap}
    logs = demo_dir / "logs"
    job = start_child("job", [
        "job", "run", "--job", "sensor-averages", "--query-id", QUERY_ID,
        "--input-topic", topics.input, "--output-topic", topics.output,
        "--checkpoint-dir", str(demo_dir / "checkpoints" / QUERY_ID),
        "--input-parallelism", str(settings.input_parallelism),
        "--set", f"enrichment_cost_ms={settings.enrichment_cost_ms}",
    ], logs, env)
    controller = start_child("controller", ["controller", "run"], logs, env)
    print(f"job and controller started; their logs are in {logs}/")
    return [job, controller]


class Narrator:
    """Drives the load and prints what happens, until the duration ends or a child dies."""

    def __init__(self, settings: DemoSettings, bootstrap: str, topics: DemoTopics, tail: Tail,
                 children: list[Child]) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.topics = topics
        self.tail = tail
        self.children = children
        self.view = QueryView(QUERY_ID)
        self.events: list[str] = []
        self.load_started = 0.0
        self.first_control_s: float | None = None
        self.pauses_ms: list[int] = []

    def run(self) -> int:
        if not self._wait_for_job():
            return 1
        profile = RateProfile("step", self.settings.base_rate_per_s,
                              self.settings.peak_rate_per_s, self.settings.step_at_s)
        spec = LoadSpec(self.bootstrap, self.topics.input, profile, self.settings.duration_s)
        stop = threading.Event()
        ledger = Ledger(spec.window_ms)
        loader = threading.Thread(target=run_load, args=(spec, ledger, stop), daemon=True)
        self.load_started = time.monotonic()
        loader.start()
        print(f"load: {profile.base_per_s:.0f} records/s, stepping to "
              f"{profile.peak_per_s:.0f}/s at {profile.start_s:.0f} s\n{HEADER}")
        exit_code = 0
        try:
            self._narrate(profile)
        except KeyboardInterrupt:
            print("\ninterrupted; stopping")
            exit_code = 130  # the shell's convention for "stopped by a signal"
        finally:
            stop.set()
            loader.join(35)
        self._summary(ledger)
        return exit_code

    def _wait_for_job(self) -> bool:
        print("waiting for the job's first metrics (Spark starts in ~10-20 s)...")
        deadline = time.monotonic() + self.settings.ready_timeout_s
        while time.monotonic() < deadline:
            if self._consume() or self.view.samples:
                return True
            if self._dead_child():
                return False
        print(f"the job sent no metrics within {self.settings.ready_timeout_s:.0f} s; "
              f"see {self.children[0].log_path}")
        return False

    def _narrate(self, profile: RateProfile) -> None:
        next_status = 0.0
        while (elapsed := time.monotonic() - self.load_started) < self.settings.duration_s:
            self._consume()
            if self._dead_child():
                return
            if elapsed >= next_status:
                lag_end = self.tail.log_end_total(self.topics.input)
                print(status_line(elapsed, profile.rate_at(elapsed), self.view, lag_end),
                      flush=True)
                next_status = elapsed + self.settings.status_every_s

    def _consume(self) -> bool:
        got = False
        for _topic, record in self.tail.poll(0.2):
            got = True
            if isinstance(record, TaskMetrics) and record.query_id == QUERY_ID:
                self.view.add(record)
            elif isinstance(record, Decision):
                self._on_decision(record)
            elif isinstance(record, Ack):
                self._on_ack(record)
        return got

    def _on_decision(self, d: Decision) -> None:
        if d.action.startswith("ack_"):
            return  # the controller logs acks as decisions too; the ack itself is shown
        elapsed = time.monotonic() - self.load_started
        if d.control_id and self.first_control_s is None and elapsed > self.settings.step_at_s:
            self.first_control_s = elapsed - self.settings.step_at_s
        if d.current_value and d.target_value:
            line = (f">>> decision at {elapsed:.0f} s: {d.action} {d.parameter} "
                    f"{d.current_value} -> {d.target_value}: {d.reason}")
        else:  # advice (throttle, cannot_help, lost, ...) changes no knob of the job
            line = f">>> {d.action.replace('_', ' ')} at {elapsed:.0f} s: {d.reason}"
        self.events.append(line)
        print(line, flush=True)

    def _on_ack(self, a: Ack) -> None:
        if a.outcome is Outcome.APPLIED:
            self.pauses_ms.append(a.pause_ms)
        line = f">>> ack: {a.outcome.value.lower()} (pause {a.pause_ms} ms): {a.detail}"
        self.events.append(line)
        print(line, flush=True)

    def _dead_child(self) -> bool:
        for child in self.children:
            if not child.alive():
                print(f"the {child.name} exited unexpectedly; last lines of its log:\n"
                      f"{child.log_tail()}")
                return True
        return False

    def _summary(self, ledger: Ledger) -> None:
        lag = self.view.lag_records(self.tail.log_end_total(self.topics.input))
        print("\nsummary")
        print(f"  records produced and acknowledged: {ledger.acked} ({ledger.failed} failed)")
        print(f"  decisions and acks: {len(self.events)}")
        for event in self.events:
            print(f"    {event}")
        if self.first_control_s is not None:
            print(f"  load step -> first control tuple: {self.first_control_s:.1f} s")
        if self.pauses_ms:
            print(f"  reconfiguration pause(s): {', '.join(f'{p} ms' for p in self.pauses_ms)}")
        arrival = self.view.arrival_per_s()
        behind = f" (about {lag / arrival:.1f} s of input)" if arrival > 0 else ""
        print(f"  lag at the end: {lag} records{behind} at parallelism "
              f"{self.view.parallelism()}; a micro-batch job always trails by roughly one "
              "trigger interval plus one batch")


def add_demo_command(groups: argparse._SubParsersAction) -> None:
    d = DemoSettings()
    p = groups.add_parser(
        "demo",
        help="run the closed loop on a local broker and Spark, with a load step",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--duration-s", type=float, default=d.duration_s,
                   help="how long the load runs before the demo stops by itself")
    p.add_argument("--base-rate", type=float, default=d.base_rate_per_s,
                   help="input rate before the step, records/s")
    p.add_argument("--peak-rate", type=float, default=d.peak_rate_per_s,
                   help="input rate after the step, records/s")
    p.add_argument("--step-at-s", type=float, default=d.step_at_s,
                   help="seconds after the load starts when the rate steps up")
    p.add_argument("--enrichment-cost-ms", type=float, default=d.enrichment_cost_ms,
                   help="simulated remote-lookup latency per record in the job")
    p.add_argument("--input-parallelism", type=int, default=d.input_parallelism,
                   help="the job's initial input parallelism (Kafka source minPartitions)")
    p.add_argument("--port", type=int, default=d.port, help="port of the local Kafka broker")
    p.set_defaults(handler=lambda args: run_demo(DemoSettings(
        duration_s=args.duration_s, base_rate_per_s=args.base_rate,
        peak_rate_per_s=args.peak_rate, step_at_s=args.step_at_s,
        enrichment_cost_ms=args.enrichment_cost_ms, input_parallelism=args.input_parallelism,
        port=args.port,
    )))
