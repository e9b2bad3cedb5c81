"""`python -m bench.day.real`: `bench.day`'s columns on the real jobs and controller, over
compressed days.

A local broker; the clickstream example's first two jobs in a pipeline, both stating a 30 s
delay objective: `click-enrich` (a catalog lookup of `LOOKUP_MS` per click, the costly stage)
feeding `click-sessions` (`SESSION_MS` per click: it has room to spare at its starting size
all day); and the real controller with its defaults except the season, compressed with the day
(`season`). Each job's capacity at its starting size is measured first, on a burst it works
through in full batches (the second job starts once the first has passed the burst on, so it
meets it as a backlog). The load is `bench.day`'s smooth day scaled to the first job's capacity
C: 1.5 C at the peak (5 units at the policy's 70 %), a quarter of that at night, ±10 % noise
per second and 5 % more every day, played after a minute at the night's rate.

Once a second the benchmark samples each job's size (from its newest metrics) and lag (the
broker's end offsets against its newest batch), and keeps every control tuple and ack as they
arrive; `bench.day.measures` turns that into the simulated days' columns (the time over the
objective on the lag; a backlog, for the scale-ups before one and a job that never fell behind,
is the lag less the batches in flight: `beyond_in_flight`). The oracle takes each
job's measured rate per unit and no per-batch cost: a lower bound, as in the simulation. A size
change undone within an eighth of the day counts as a reversal: ten minutes would span most of
a compressed day, whose load turns every four minutes.

    .venv/bin/python -m bench.day.real                      # 3 days of 8 minutes, ~30 min
    .venv/bin/python -m bench.day.real --days 1 --day-s 180 # a smoke run

Writes `bench/results/day.real.json`; `python -m bench.report --write` renders it.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from bench import record
from bench.bed import Bed, local_broker, loop_env, wait_until
from bench.day.__main__ import OBJECTIVE_S, table
from bench.day.measures import BACKLOG_FLOOR, days_of
from bench.sim import profiles
from bench.sim.model import JobSpec
from bench.sim.run import Scenario, Trace
from schemas import Ack, ControlTuple, Decision, TaskMetrics
from schemas.records import TAKEOVER
from streamctl.clicks import ClickLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.processes import Child, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.stack.topics import TopicSpec, ensure_topics
from streamctl.tail import Tail
from streamctl.view import QueryView, full_batch_rate

LOOKUP_MS = 5.0
SESSION_MS = 0.5
BATCH_CAP = 2000
TRIGGER_S = 2
UNITS = 2
WARMUP_S = 60
PEAK_OVER_CAPACITY = 1.5
NIGHT_SHARE = 0.25


@dataclass(frozen=True)
class Stage:
    name: str
    """The example job's name, also its query id."""
    source: str
    sink: str
    knob: str
    options: tuple[str, ...]


STAGES = (
    Stage("click-enrich", "clicks", "enriched", "input_parallelism",
          ("--input-parallelism", str(UNITS), "--set", f"lookup_cost_ms={LOOKUP_MS}")),
    Stage("click-sessions", "enriched", "sessionized", "state_partitions",
          ("--state-partitions", str(UNITS), "--max-state-partitions", "16",
           "--set", f"model_cost_ms={SESSION_MS}", "--set", "watermark_s=600")),
)
"""The pipeline, in order."""


def season(day_s: int) -> tuple[str, ...]:
    """The season compressed with the day: buckets of a 96th of it (5 minutes of a real
    day), periods from half a day to a day and a quarter, and a lead of 30 s, the time a
    restart and its drain take here (the controller's other timings stay real)."""
    return ("--season-bucket-s", f"{day_s / 96:g}", "--season-min-period-s", f"{day_s / 2:g}",
            "--season-max-period-s", f"{day_s * 1.25:g}", "--season-lead-s", "30")


class DayRates:
    """A simulated day's load as the load generator plays it."""

    def __init__(self, profile: profiles.Profile) -> None:
        self.profile = profile

    def rate_at(self, t_s: float) -> float:
        return self.profile.rate_at(t_s)

    def expected_by(self, t_s: float) -> float:
        return self.profile.produced(t_s)


@dataclass
class Watch:
    """Both jobs' metrics, and the control tuples and acks (stamped `time.monotonic()`), as
    they arrive."""

    bed: Bed
    topics: dict[str, str]

    def __post_init__(self) -> None:
        t = self.topics
        self.views = {stage.name: QueryView(stage.name) for stage in STAGES}
        self.tail = Tail(self.bed.bootstrap_servers,
                         {t["metrics"]: TaskMetrics, t["control"]: ControlTuple,
                          t["acks"]: Ack, t["decisions"]: Decision}, from_beginning=True)
        self.children: list[Child] = []
        self.controls: list[tuple[float, ControlTuple]] = []
        self.acks: list[tuple[float, Ack]] = []
        self.sent: dict[str, Decision] = {}
        """The decision behind each control tuple, by its control id."""
        self.led = False

    def poll(self) -> None:
        for _topic, got in self.tail.poll(0.2):
            now = time.monotonic()
            if isinstance(got, TaskMetrics) and got.query_id in self.views:
                self.views[got.query_id].add(got)
            elif isinstance(got, ControlTuple):
                self.controls.append((now, got))
            elif isinstance(got, Ack):
                self.acks.append((now, got))
            elif isinstance(got, Decision):
                self.led = self.led or got.action == TAKEOVER
                if got.control_id and not got.action.startswith("ack_"):
                    self.sent[got.control_id] = got

    def lag(self, stage: Stage) -> int:
        end = self.tail.log_end_total(self.topics[stage.source])
        return self.views[stage.name].lag_records(end)

    def units(self, stage: Stage) -> int:
        samples = self.views[stage.name].samples
        return int(getattr(samples[-1], stage.knob)) if samples else UNITS

    def drained(self, stage: Stage) -> Callable[[], bool]:
        return lambda: bool(self.views[stage.name].samples) and self.lag(stage) == 0

    def until(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        wait_until(done, timeout_s, what, self.children, self.poll)


def _topics(bootstrap: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    data = ("clicks", "enriched", "sessionized")
    kinds = (*data, "dlq", "metrics", "control", "acks", "decisions", "lease")
    topics = {k: f"bench-day-{tag}-{k}" for k in kinds}
    ensure_topics(bootstrap, [TopicSpec(n, partitions=2 if k in data else 1)
                              for k, n in topics.items()])
    return topics


def _start_job(watch: Watch, env: dict[str, str], stage: Stage) -> None:
    t = watch.topics
    watch.children.append(start_child(stage.name, [
        "job", "run", "--job", stage.name, "--query-id", stage.name,
        "--input-topic", t[stage.source], "--output-topic", t[stage.sink],
        "--dlq-topic", t["dlq"], "--checkpoint-dir", str(watch.bed.workdir / stage.name),
        *stage.options, "--max-offsets-per-trigger", str(BATCH_CAP),
        "--trigger-interval-s", str(TRIGGER_S), "--max-delay-s", f"{OBJECTIVE_S:g}",
        "--metrics-port", "0", "--max-shed-fraction", "0",
    ], watch.bed.workdir, env))


def _calibrate(watch: Watch, env: dict[str, str]) -> list[float]:
    """Each job's records/s at its starting size, in pipeline order: the first works through
    a burst, and the second, started after that, through what the first passed on."""
    first = STAGES[0]
    _start_job(watch, env, first)
    watch.until(lambda: bool(watch.views[first.name].samples), 300, f"{first.name} to start")
    run_load(LoadSpec(watch.bed.bootstrap_servers, watch.topics[first.source],
                      RateProfile("constant", 4000), 4 * BATCH_CAP / 4000, event_type="click",
                      users=300, start_seq=10**9), ClickLedger())
    capacities = []
    for stage in STAGES:
        if stage is not first:
            _start_job(watch, env, stage)
        watch.until(watch.drained(stage), 300, f"{stage.name} to work through the burst")
        rate = full_batch_rate(watch.views[stage.name].samples, BATCH_CAP)
        if rate is None:
            raise RuntimeError(f"no full batch of {stage.name} in the calibration burst")
        capacities.append(rate)
    return capacities


def scenario(capacities: Sequence[float], days: int, day_s: int, seed: int) -> Scenario:
    """The load and both jobs as the oracle sees them (measured μ, no per-batch cost)."""
    peak = PEAK_OVER_CAPACITY * capacities[0]
    load = profiles.day_shaped(NIGHT_SHARE * peak, peak, days, day_s, prefix_s=WARMUP_S,
                               relative_sd=0.1, drift_per_day=0.05, crowd=None, seed=seed)
    specs = tuple(JobSpec(stage.name, stage.source, stage.sink,
                          rate_per_unit=capacity / UNITS, overhead_s=0.0,
                          max_per_batch=BATCH_CAP, trigger_s=TRIGGER_S,
                          scaling_parameter=stage.knob, max_state_partitions=16,
                          max_delay_s=OBJECTIVE_S)
                  for stage, capacity in zip(STAGES, capacities, strict=True))
    return Scenario("real days", load, specs, duration_s=days * day_s, warmup_s=WARMUP_S,
                    backlog_target_s=OBJECTIVE_S, tick_s=1.0)


def run(bed: Bed, days: int, day_s: int,
        seed: int) -> tuple[Trace, list[float], dict[str, Decision]]:
    topics = _topics(bed.bootstrap_servers)
    watch = Watch(bed, topics)
    env = loop_env(bed.bootstrap_servers, topics,
                   STREAMCTL_CONTROLLER_GROUP_ID=f"{topics['lease']}-group")
    try:
        capacities = _calibrate(watch, env)
        chosen = scenario(capacities, days, day_s, seed)
        watch.children.append(start_child("controller", [
            "controller", "run", "--metrics-port", "0", "--instance-id", "bench",
            "--metrics-offset-reset", "latest", *season(day_s)], bed.workdir, env))
        watch.until(lambda: watch.led, 60, "the controller to lead")
        return _play(watch, chosen), capacities, watch.sent
    finally:
        stop_all(watch.children)
        watch.tail.close()


def _play(watch: Watch, chosen: Scenario) -> Trace:
    """The load, with each job's size and backlog sampled once a second; times from the
    load's start."""
    spec = LoadSpec(watch.bed.bootstrap_servers, watch.topics[STAGES[0].source],
                    DayRates(chosen.profile), chosen.warmup_s + chosen.duration_s,
                    event_type="click", users=300)
    trace = Trace(chosen, "defaults", units={s.name: [] for s in STAGES},
                  backlog={s.name: [] for s in STAGES})
    load = threading.Thread(target=run_load, args=(spec, ClickLedger()), daemon=True)
    origin = time.monotonic()
    load.start()
    while load.is_alive():
        watch.poll()
        second = int(time.monotonic() - origin)
        if second > len(trace.times_s):
            # A second the watch missed (a slow poll) holds what it sees now: the day's
            # unit-seconds count every second.
            sample = {stage.name: (watch.units(stage), watch.lag(stage)) for stage in STAGES}
            while len(trace.times_s) < second:
                trace.times_s.append(float(len(trace.times_s) + 1))
                for name, (units, backlog) in sample.items():
                    trace.units[name].append(units)
                    trace.backlog[name].append(backlog)
    trace.controls.extend((t - origin, c) for t, c in watch.controls)
    trace.acks.extend((t - origin, a) for t, a in watch.acks)
    return trace


def beyond_in_flight(trace: Trace) -> Trace:
    """`trace` with its `waiting`: each sampled lag less what arrived in the last two trigger
    intervals (the batch running and the one gathering, at the load's nominal rate), the
    backlog as the controller means it, which a job that keeps up never has. The lag itself,
    which counts those records too, stays the measure of the time over the objective."""
    profile = trace.scenario.profile
    in_flight = [profile.produced(t) - profile.produced(t - 2 * TRIGGER_S) for t in trace.times_s]
    waiting = {name: [max(0, lag - round(f)) for lag, f in zip(lags, in_flight, strict=True)]
               for name, lags in trace.backlog.items()}
    return replace(trace, waiting=waiting)


def tuples(trace: Trace, sent: dict[str, Decision]) -> list[dict[str, object]]:
    """Every control tuple of the run: when, to which job, what it changed, the job's
    backlog then (`beyond_in_flight`), and why (the controller's reason)."""
    rows: list[dict[str, object]] = []
    for at_s, control in trace.controls:
        decision = sent.get(control.control_id)
        before = max(0, min(len(trace.times_s), int(at_s)) - 1)
        rows.append({
            "at_s": round(at_s, 1), "query_id": control.query_id,
            "change": (f"{decision.parameter} {decision.current_value} → "
                       f"{decision.target_value}") if decision else "?",
            "backlog": trace.waiting[control.query_id][before] if trace.times_s else None,
            "reason": decision.reason if decision else "?"})
    return rows


def never_behind(trace: Trace) -> dict[str, bool]:
    """Per job: whether its backlog (`beyond_in_flight`) stayed within the policy's noise
    floor all run."""
    return {name: max(backlog, default=0) <= BACKLOG_FLOOR
            for name, backlog in trace.waiting.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.day.real", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=3, help="days (default 3)")
    parser.add_argument("--day-s", type=int, default=480,
                        help="seconds in a day (default 480)")
    parser.add_argument("--seed", type=int, default=11, help="seed of the load's noise")
    args = parser.parse_args(argv)
    load_before = record.load_average()
    with local_broker("streamctl-day-real-") as bed:
        trace, capacities, sent = run(bed, args.days, args.day_s, args.seed)
    trace = beyond_in_flight(trace)
    per_day = days_of(trace, args.day_s, reversal_s=args.day_s / 8)
    print(table("real days, defaults", per_day), flush=True)
    calm = never_behind(trace)
    restarts_never_behind = sum(1 for _, c in trace.controls if calm[c.query_id])
    print(f"tuples to a job that never fell behind: {restarts_never_behind} of "
          f"{len(trace.controls)}", flush=True)
    path = record.write("day.real", {
        "days": args.days, "day_s": args.day_s, "seed": args.seed, "objective_s": OBJECTIVE_S,
        "capacities_per_s": dict(zip((s.name for s in STAGES), capacities, strict=True)),
        "peak_over_capacity": PEAK_OVER_CAPACITY, "night_share": NIGHT_SHARE,
        "reversal_s": args.day_s / 8, "never_behind": calm,
        "restarts_never_behind": restarts_never_behind, "tuples": tuples(trace, sent),
        "days_measured": [[job.as_dict() for job in day] for day in per_day],
    }, load_before, argv=sys.argv[1:] if argv is None else list(argv))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
