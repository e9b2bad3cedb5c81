"""`streamctl demo`: the whole closed loop on one machine, narrated in the terminal.

It starts (or reuses) the local Kafka broker, recreates the demo's topics, starts the job (or,
with `--pipeline`, the three jobs of `examples/clickstream` chained through topics) and the
controller as child processes, waits for their first metrics, then drives a load that steps up
so the jobs fall behind. Every few seconds it prints, per job, the input rate, arrival and
processing rates, lag, batch time and the knob the job scales with; decisions and acks are
printed as they happen. It ends by itself after `--duration-s` (or on Ctrl-C), stops every
process it started and prints a summary: the load step to the first control tuple and to its
ack, the pauses, and when each job's lag was back to its level before the step.
"""

from __future__ import annotations

import argparse
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from schemas import Ack, Decision, TaskMetrics
from streamctl.loadgen import LoadSpec
from streamctl.narrate import Narrator, StepFigures, Watched
from streamctl.processes import Child, sigterm_as_interrupt, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.stack import defaults
from streamctl.stack.tcp import find_free_ports
from streamctl.stack.topics import TopicSpec
from streamctl.tail import Tail


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
    pipeline: bool = False


@dataclass(frozen=True)
class DemoJob:
    """One job the demo runs: its name, input and output topics, and its own options."""

    name: str
    input_topic: str
    output_topic: str
    args: tuple[str, ...] = ()

    @property
    def dlq_topic(self) -> str:
        return f"{self.input_topic}.dlq"


@dataclass(frozen=True)
class Scenario:
    """The jobs of a demo, the load it drives into the first one, and its data topics."""

    jobs: tuple[DemoJob, ...]
    event_type: str

    def data_topics(self) -> list[TopicSpec]:
        topics = {j.input_topic for j in self.jobs} | {j.output_topic for j in self.jobs}
        return ([TopicSpec(t, partitions=2) for t in sorted(topics)]
                + [TopicSpec(j.dlq_topic, partitions=1) for j in self.jobs])


def sensor_scenario(settings: DemoSettings) -> Scenario:
    return Scenario((DemoJob("sensor-averages", defaults.INPUT_TOPIC, defaults.OUTPUT_TOPIC, (
        "--input-parallelism", str(settings.input_parallelism),
        "--set", f"enrichment_cost_ms={settings.enrichment_cost_ms}")),), "sensor")


def pipeline_scenario(settings: DemoSettings) -> Scenario:
    """examples/clickstream: clicks → enrich → sessions (stateful) → alerts."""
    cost = f"{settings.enrichment_cost_ms}"
    return Scenario((
        DemoJob("click-enrich", "clicks", "clicks-enriched", ("--set", "lookup_cost_ms=0.5")),
        DemoJob("click-sessions", "clicks-enriched", "clicks-sessionized", (
            "--state-partitions", "2", "--set", f"model_cost_ms={cost}")),
        DemoJob("click-alerts", "clicks-sessionized", "click-alerts", (
            "--set", f"check_cost_ms={cost}")),
    ), "click")


CONTROL_TOPICS = (defaults.METRICS_TOPIC, defaults.CONTROL_TOPIC, defaults.ACKS_TOPIC,
                  defaults.DECISIONS_TOPIC, defaults.STATE_TOPIC, defaults.LEASE_TOPIC)


@dataclass(frozen=True)
class Played:
    """How a demo run ended, and what it measured (None: it never got to the load)."""

    exit_code: int
    figures: StepFigures | None


def run_demo(settings: DemoSettings) -> int:
    return play(settings).exit_code


def play(settings: DemoSettings) -> Played:
    """The demo, start to summary, as `streamctl demo` runs it."""
    state_dir = defaults.default_state_dir()
    scenario = pipeline_scenario(settings) if settings.pipeline else sensor_scenario(settings)
    with sigterm_as_interrupt(), ExitStack() as cleanup:
        bootstrap = _start_broker(settings, state_dir, cleanup)
        _recreate_topics(bootstrap, scenario)
        demo_dir = state_dir / "demo"
        shutil.rmtree(demo_dir / "checkpoints", ignore_errors=True)
        tail = Tail(bootstrap, {defaults.METRICS_TOPIC: TaskMetrics, defaults.ACKS_TOPIC: Ack,
                                defaults.DECISIONS_TOPIC: Decision})
        cleanup.callback(tail.close)
        children = _start_children(scenario, bootstrap, demo_dir)
        cleanup.callback(stop_all, children)
        profile = RateProfile("step", settings.base_rate_per_s, settings.peak_rate_per_s,
                              settings.step_at_s)
        load = LoadSpec(bootstrap, scenario.jobs[0].input_topic, profile, settings.duration_s,
                        event_type=scenario.event_type)
        narrator = Narrator(profile, load,
                            [Watched(j.name, j.input_topic) for j in scenario.jobs], tail,
                            children, settings.status_every_s, settings.ready_timeout_s)
        exit_code = narrator.run()
        return Played(exit_code, narrator.figures() if narrator.load_started else None)
    return Played(1, None)


def _start_broker(settings: DemoSettings, state_dir: Path, cleanup: ExitStack) -> str:
    from streamctl.stack.broker import LocalBroker

    broker = LocalBroker(state_dir=state_dir, port=settings.port)
    started = time.monotonic()
    if broker.start(timeout_s=90):
        cleanup.callback(broker.stop)
        print(f"broker: Kafka ready on {broker.bootstrap_servers} "
              f"in {time.monotonic() - started:.1f} s")
    else:
        print(f"broker: reusing the running local broker on {broker.bootstrap_servers}")
    return broker.bootstrap_servers


def _recreate_topics(bootstrap: str, scenario: Scenario) -> None:
    """Fresh topics every run, so a demo never replays an older run's data or decisions."""
    from streamctl.stack.topics import delete_topics, ensure_topics

    control = [spec for spec in defaults.DEFAULT_TOPICS if spec.name in CONTROL_TOPICS]
    specs = control + scenario.data_topics()
    delete_topics(bootstrap, [s.name for s in specs])
    ensure_topics(bootstrap, specs)


def _start_children(scenario: Scenario, bootstrap: str, demo_dir: Path) -> list[Child]:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": bootstrap}
    logs = demo_dir / "logs"
    children = []
    try:
        for job in scenario.jobs:
            children.append(start_child(job.name, [
                "job", "run", "--job", job.name, "--input-topic", job.input_topic,
                "--output-topic", job.output_topic, "--dlq-topic", job.dlq_topic,
                "--checkpoint-dir", str(demo_dir / "checkpoints" / job.name),
                "--metrics-port", "0", *job.args], logs, env))
        (page_port,) = find_free_ports(1)
        children.append(start_child("controller", ["controller", "run", "--metrics-port",
                                                   str(page_port)], logs, env))
    except BaseException:
        stop_all(children)
        raise
    jobs = ", ".join(j.name for j in scenario.jobs)
    print(f"{'jobs' if len(scenario.jobs) > 1 else 'job'} {jobs} and the controller started; "
          f"their logs are in {logs}/; the controller's live page is at "
          f"http://127.0.0.1:{page_port}/ui")
    return children


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
    p.add_argument("--pipeline", action="store_true",
                   help="run the three-job pipeline of examples/clickstream (JSON clicks → "
                        "enrich → sessions → alerts) instead of the sensor job; with it the "
                        "rates default to 60 → 300 clicks/s and the cost to 10 ms")
    p.set_defaults(handler=_demo_command)


PIPELINE_DEFAULTS = {"base_rate": 60.0, "peak_rate": 300.0, "enrichment_cost_ms": 10.0}
"""The pipeline's defaults when the options are not given: each click costs Python work in
three jobs on the same 2 cores (JSON and Avro decoding and encoding, the session state), so
the rates stay where the cost per click, which the knobs scale, dominates that CPU work."""


def _demo_command(args: argparse.Namespace) -> int:
    if args.pipeline:
        for name, value in PIPELINE_DEFAULTS.items():
            if getattr(args, name) == _DEFAULTS[name]:
                setattr(args, name, value)
    return run_demo(DemoSettings(
        duration_s=args.duration_s, base_rate_per_s=args.base_rate,
        peak_rate_per_s=args.peak_rate, step_at_s=args.step_at_s,
        enrichment_cost_ms=args.enrichment_cost_ms, input_parallelism=args.input_parallelism,
        port=args.port, pipeline=args.pipeline))


_DEFAULTS = {"base_rate": DemoSettings.base_rate_per_s,
             "peak_rate": DemoSettings.peak_rate_per_s,
             "enrichment_cost_ms": DemoSettings.enrichment_cost_ms}
