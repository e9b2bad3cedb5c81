"""Benchmark: how fast the closed loop reacts to a load step, a spike and a ramp.

For each scenario and run: a local broker (one for the whole benchmark), the real sensor job
(2 units, 1 s trigger, 5 ms per record, batches of at most 1 500) and the real controller on
topics of their own. The job's capacity C at 2 units is measured first (a burst it works
through in full batches, before the controller starts); every load is relative to it:

- step:  0.4 C for 30 s, then 3 C for 60 s;
- spike: 0.4 C, 6 C for 3 s at 30 s, then 0.4 C again for 45 s (the catch-up target absorbs it);
- ramp:  0.4 C, rising linearly to 3 C from 30 s to 120 s, held for 30 s;
- down:  the job started over-provisioned at 16 units with a 4 s trigger, a constant tenth of
  its capacity there for 240 s (the controller must size it down in at most two steps,
  without flapping);
- idle:  the same job with no input at all for 240 s (it must go to its minimum).

The scale-down scenarios' controller reads the metrics topic from its start, as one that ran
all along would have: it saw the calibration burst, so it knows the job's processing rate.
Their 4 s trigger: at a 1 s trigger, 16 tasks cost the 2 cores about 0.7 s of fixed work a
batch whatever it holds, the job is busy all the time, and the model (whose per-batch overhead
does not grow with the units) rightly sees no room (docs/model-and-policy.md).

It reads the controller's decisions and the job's acks and metrics as they arrive and reports,
per scenario, the figures of issue 12's table: load change → first control tuple, tuple →
applied, its pause, change → lag back to its level before the change (in seconds behind the
input: the lag in records over the load's rate at that moment, at most the highest of the 10 s
before the change; in records, a batch's worth of arrivals at 3 C is 7.5 times one at 0.4 C
however fast the job runs), change → caught up (the first batch after the ack that left
nothing at the broker when it was planned: `lag_records`, the controller's own measure of a
backlog), change → sized (the last tuple's ack), and how many tuples were sent (a spike: none;
a ramp: at most 2; down and idle: at most 2, each below the one before). For down and idle the
"change" is the controller's start: the load is low from the beginning.

    .venv/bin/python -m bench.reaction --runs 5

`--by-hand UNITS …` adds the step without a controller, once per size given: at the
controller's own time to its tuple after the change (`BY_HAND_AFTER_S`), the benchmark itself
sends one tuple setting the units, with the batch cap per unit the job started with, and
measures the same figures. What the controller chose is then read beside what each size
would have done on this machine, in one run:

    .venv/bin/python -m bench.reaction --runs 1 --scenarios step --by-hand 4 8 16

prints a table (medians over the runs, beside the targets) and writes
`bench/results/reaction.json` (`bench.report` renders it into `docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import record
from bench.bed import CONTROL_KEY, local_broker, loop_env, wait_until
from controller.core.batches import lag_records
from schemas import Ack, Decision, Outcome, TaskMetrics
from schemas.knobs import INPUT_PARALLELISM, MAX_OFFSETS_PER_TRIGGER
from schemas.records import TAKEOVER, KnobSetting
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.stack.topics import TopicSpec, ensure_topics
from streamctl.tail import Tail
from streamctl.view import QueryView, full_batch_rate
from streaming_jobs.send_cli import sender, signed_tuple

BATCH_CAP = 1500
CHANGE_AT_S = 30.0

SCENARIOS: dict[str, Callable[[float], tuple[RateProfile, float]]] = {
    "step": lambda c: (RateProfile("step", 0.4 * c, 3 * c, CHANGE_AT_S), CHANGE_AT_S + 60),
    "spike": lambda c: (RateProfile("spike", 0.4 * c, 6 * c, CHANGE_AT_S, CHANGE_AT_S + 3),
                        CHANGE_AT_S + 45),
    "ramp": lambda c: (RateProfile("ramp", 0.4 * c, 3 * c, CHANGE_AT_S, CHANGE_AT_S + 90),
                       CHANGE_AT_S + 120),
    "down": lambda c: (RateProfile("constant", 0.1 * c), SCALE_DOWN_S),
    "idle": lambda c: (RateProfile("constant", 0.0), SCALE_DOWN_S),
}
"""Per scenario: (profile, load duration) for a capacity C."""

BY_HAND_AFTER_S = 4.0
"""When a by-hand step's tuple is sent after the change: the controller's own time to its
tuple in this benchmark's step (within its ≤ 5 s target), so that a by-hand run differs from
the controller's only in the size it sets."""

START_UNITS = {"down": 16, "idle": 16}
"""Units the job starts with where not 2: the scale-down scenarios (4 s trigger, a controller
reading the metrics from their start)."""
SCALE_DOWN_TRIGGER_S = 4
SCALE_DOWN_S = 240.0
"""The scale-down scenarios' length: the 120 s stabilisation, two steps and their cooldown."""

TARGETS = {"change_to_tuple_s": "≤ 5 s", "change_to_recovered_s": "≤ 40 s",
           "change_to_sized_s": "≤ 180 s (down, idle)",
           "tuples": {"step": "1", "spike": "0", "ramp": "≤ 2", "down": "≤ 2", "idle": "≤ 2"}}


@dataclass(frozen=True)
class Run:
    scenario: str
    capacity_per_s: float
    tuples: int
    change_to_tuple_s: float | None
    tuple_to_applied_s: float | None
    pause_s: float | None
    change_to_recovered_s: float | None
    targets: tuple[str, ...]
    """The knob values the tuples set, in order."""
    change_to_sized_s: float | None = None
    """From the change to the ack of the last tuple sent (None: none was applied)."""
    applied_detail: str | None = None
    """The first tuple's ack: where its pause went (quiesce, restart, first batch)."""
    reasons: tuple[str, ...] = ()
    """Why each tuple was sent: the controller's reason, then its figures (`Decision`), so
    that a run that sent what it should not have can be told apart without a replay."""
    change_to_caught_up_s: float | None = None
    """From the change to the first batch after the first tuple's ack that left nothing
    behind at the broker (None: none did, or nothing was applied). Unlike the lag, which at
    3 C holds a batch's worth of arrivals however fast the job runs, this says the backlog
    is gone; a size that never kept up catches up only once the load has ended."""


class Loop:
    """One job and one controller on fresh topics, and what they write, as it arrives."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        kinds = ("in", "out", "dlq", "metrics", "control", "acks", "decisions", "lease")
        self.topics = {k: f"bench-reaction-{tag}-{k}" for k in kinds}
        ensure_topics(bootstrap, [TopicSpec(n, partitions=2 if k in ("in", "out") else 1)
                                  for k, n in self.topics.items()])
        self.bootstrap, self.workdir, self.query_id = bootstrap, workdir, f"bench-{tag}"
        t = self.topics
        self.env = loop_env(bootstrap, t, STREAMCTL_CONTROLLER_GROUP_ID=f"bench-reaction-{tag}")
        self.children: list[Child] = []
        self.view = QueryView(self.query_id)
        self.decisions: list[tuple[float, Decision]] = []
        self.acks: list[tuple[float, Ack]] = []
        self.lags: list[tuple[float, int]] = []
        self.load_rate: Callable[[float], float] = lambda _t: 0.0
        """The load's records/s at a moment (`time.monotonic`), once a scenario's load runs."""
        self.left_behind: list[tuple[float, int]] = []
        """Per batch as it arrived: what it left at the broker when planned (`lag_records`)."""
        self._tail = Tail(bootstrap, {t["metrics"]: TaskMetrics, t["decisions"]: Decision,
                                      t["acks"]: Ack}, from_beginning=True)

    def start_job(self, units: int = 2, trigger_s: float = 1, *extra: str) -> None:
        t = self.topics
        self.children.append(start_child("job", [
            "job", "run", "--job", "sensor-averages", "--query-id", self.query_id,
            "--input-topic", t["in"], "--output-topic", t["out"], "--dlq-topic", t["dlq"],
            "--checkpoint-dir", str(self.workdir / self.query_id),
            "--input-parallelism", str(units),
            "--max-offsets-per-trigger", str(BATCH_CAP), "--set", "enrichment_cost_ms=5",
            "--trigger-interval-s", f"{trigger_s:g}", "--metrics-port", "0",
            # Sized, never shed: `extra` (later options win) may allow shedding.
            "--max-shed-fraction", "0", *extra],
            self.workdir, self.env))

    def start_controller(self, metrics_from: str = "latest", *extra: str) -> None:
        self.children.append(start_child("controller", [
            "controller", "run", "--metrics-port", "0", "--instance-id", "bench",
            "--metrics-offset-reset", metrics_from, *extra],
            self.workdir, self.env))
        self.wait(lambda: any(d.action == TAKEOVER for _, d in self.decisions), 60,
                  "the controller to lead")

    def poll(self) -> None:
        batches = False
        for _topic, got in self._tail.poll(0.3):
            now = time.monotonic()
            if isinstance(got, TaskMetrics) and got.query_id == self.query_id:
                self.view.add(got)
                self.heard(now, got)
                if got.batch_id >= 0 and not got.beat:
                    self.left_behind.append((now, lag_records(got)))
                batches = batches or (got.batch_id >= 0 and not got.beat)
            elif isinstance(got, Decision):
                self.decisions.append((now, got))
            elif isinstance(got, Ack):
                self.acks.append((now, got))
        if batches:
            # Once per poll, not per record: the lag asks the broker, and a watcher that
            # asked per record (beats and heartbeats included) fell behind what it watched.
            self.lags.append((time.monotonic(), self.lag()))

    def heard(self, at: float, metrics: TaskMetrics) -> None:
        """Called with every metrics record of the query as it arrives (`time.monotonic`)."""

    def lag(self) -> int:
        return self.view.lag_records(self._tail.log_end_total(self.topics["in"]))

    def wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        wait_until(done, timeout_s, what, self.children, self.poll)

    def capacity(self) -> float:
        """The job's records/s at the units it runs: a burst of four full batches
        (`full_batch_rate`)."""
        burst = LoadSpec(self.bootstrap, self.topics["in"], RateProfile("constant", 4000),
                         4 * BATCH_CAP / 4000, start_seq=10**9)
        run_load(burst, Ledger(10_000))
        self.wait(lambda: bool(self.view.samples) and self.lag() == 0, 300, "the burst")
        rate = full_batch_rate(self.view.samples, BATCH_CAP)
        if rate is None:
            raise RuntimeError("no full batch in the calibration burst")
        return rate

    def sent(self) -> list[tuple[float, Decision]]:
        return [(t, d) for t, d in self.decisions
                if d.control_id and not d.action.startswith("ack_")]

    def close(self) -> None:
        stop_all(self.children)
        self._tail.close()


def run_scenario(name: str, bootstrap: str, workdir: Path) -> Run:
    loop = Loop(bootstrap, workdir)
    try:
        down = name in START_UNITS
        loop.start_job(START_UNITS.get(name, 2), SCALE_DOWN_TRIGGER_S if down else 1)
        capacity = loop.capacity()
        loop.start_controller("earliest" if down else "latest")
        with _Load(loop, name, capacity) as load:
            # The scale-down scenarios' load is low from the start: their change is now.
            change = load.started + (0.0 if down else CHANGE_AT_S)
            load.wait_done()
        return _figures(name, loop, capacity, change)
    finally:
        loop.close()


class _Load:
    """Scenario `name`'s load for `capacity`, started on the loop's input now; stopped on
    leaving its `with` (a run that ends early does not go on loading the next one's bed)."""

    def __init__(self, loop: Loop, name: str, capacity: float) -> None:
        profile, self.duration_s = SCENARIOS[name](capacity)
        spec = LoadSpec(loop.bootstrap, loop.topics["in"], profile, self.duration_s)
        self._loop = loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=run_load, args=(spec, Ledger(10_000), self._stop),
                                        daemon=True)
        self.started = started = time.monotonic()
        # After the load ended, the rate it ended at: what is left is that many seconds behind.
        loop.load_rate = lambda t: profile.rate_at(min(t - started, self.duration_s))
        self._thread.start()

    def __enter__(self) -> _Load:
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(LOAD_STOP_S)

    def wait_done(self) -> None:
        """Until the load ended and the job read its input to the end."""
        self._loop.wait(lambda: not self._thread.is_alive(), self.duration_s + 60, "the load")
        self._loop.wait(lambda: self._loop.lag() == 0, 180, "the backlog to drain")


LOAD_STOP_S = 30.0
"""How long a stopped load may take to flush what it produced."""


def run_by_hand(units: int, bootstrap: str, workdir: Path) -> Run:
    """The step without a controller: `BY_HAND_AFTER_S` after the change the benchmark sends
    one tuple setting `units`, and batches of `BATCH_CAP` / 2 records a unit (the cap per
    unit the job starts with, which the controller keeps when it resizes). The sender holds
    the ack topic before the load starts, so the tuple leaves on time. A tuple the job did
    not apply (refused, or no ack within `BY_HAND_ACK_S`) leaves a run without figures, its
    answer in `applied_detail`."""
    loop = Loop(bootstrap, workdir)
    try:
        loop.start_job(2, 1)
        capacity = loop.capacity()
        with (sender(bootstrap, loop.topics["control"], loop.topics["acks"]) as out,
              _Load(loop, "step", capacity) as load):
            change = load.started + CHANGE_AT_S
            loop.wait(lambda: time.monotonic() >= change + BY_HAND_AFTER_S, CHANGE_AT_S + 30,
                      "the time to resize")
            tuple_ = signed_tuple(
                loop.query_id, INPUT_PARALLELISM, str(units), CONTROL_KEY.encode(), epoch=1,
                together=(KnobSetting(MAX_OFFSETS_PER_TRIGGER, str(units * BATCH_CAP // 2)),),
                reason=f"bench.reaction --by-hand {units}")
            sent_at = time.monotonic()
            out.publish(tuple_)
            answer: list[Ack] = []

            def answered() -> bool:  # between the loop's own reads: one thread, one consumer
                ack = out.answer(tuple_.control_id, 0.0)
                answer.extend([ack] if ack is not None else [])
                return bool(answer) or time.monotonic() > sent_at + BY_HAND_ACK_S

            loop.wait(answered, BY_HAND_ACK_S + 30, f"the answer to {units} units")
            applied = answer[0] if answer and answer[0].outcome is Outcome.APPLIED else None
            if applied is not None:
                load.wait_done()
        if applied is None:
            said = answer[0] if answer else f"no ack within {BY_HAND_ACK_S:.0f} s"
            print(f"  the job did not apply {units} units: {said}", flush=True)
            return Run(scenario="step", capacity_per_s=round(capacity, 1), tuples=1,
                       change_to_tuple_s=_round(sent_at - change), tuple_to_applied_s=None,
                       pause_s=None, change_to_recovered_s=None, targets=(str(units),),
                       applied_detail=str(said), reasons=("set by hand",))
        return _by_hand_figures(loop, units, capacity, change, sent_at, applied)
    finally:
        loop.close()


BY_HAND_ACK_S = 180.0
"""How long a by-hand tuple's ack may take (a restart under load, with the job's own retries)."""


def _by_hand_figures(loop: Loop, units: int, capacity: float, change: float, sent_at: float,
                     ack: Ack) -> Run:
    applied_at = next(t for t, a in loop.acks if a.control_id == ack.control_id)
    recovered = _lag_back(loop, change, applied_at)
    caught_up = _caught_up(loop, applied_at)
    return Run(
        scenario="step", capacity_per_s=round(capacity, 1), tuples=1,
        change_to_tuple_s=_round(sent_at - change),
        tuple_to_applied_s=_round(applied_at - sent_at), pause_s=_round(ack.pause_ms / 1000),
        change_to_recovered_s=_round(recovered - change if recovered else None),
        targets=(str(units),), change_to_sized_s=_round(applied_at - change),
        applied_detail=ack.detail, reasons=("set by hand",),
        change_to_caught_up_s=_round(caught_up - change if caught_up else None))


def _lag_back(loop: Loop, change: float, applied_at: float | None) -> float | None:
    """When the lag, in seconds behind the input, first came back after `applied_at` to its
    highest in the 10 s before the change (None: it did not, or nothing was applied)."""
    behind = [(t, _seconds_behind(lag, loop.load_rate(t))) for t, lag in loop.lags]
    level = max((s for t, s in behind if change - 10 <= t < change), default=0.0)
    return None if applied_at is None else next(
        (t for t, s in behind if t > applied_at and s <= level), None)


def _seconds_behind(lag: int, rate: float) -> float:
    """How long the input takes to bring `lag` records at `rate` records/s: the age of the
    oldest unread record, were the rate steady (none left: 0; left with no input: never)."""
    return 0.0 if lag == 0 else (lag / rate if rate > 0 else math.inf)


def _caught_up(loop: Loop, applied_at: float | None) -> float | None:
    """When the first batch after `applied_at` that left nothing behind arrived."""
    return None if applied_at is None else next(
        (t for t, left in loop.left_behind if t > applied_at and left == 0), None)


def _figures(name: str, loop: Loop, capacity: float, change: float) -> Run:
    sent = [(t, d) for t, d in loop.sent() if t >= change]
    first = sent[0] if sent else None
    applied = next(((t, a) for t, a in loop.acks if first is not None
                    and a.control_id == first[1].control_id
                    and a.outcome is Outcome.APPLIED), None)
    applied_at = applied[0] if applied else None
    # A scale-down leaves no backlog to recover from.
    recovered = None if name in START_UNITS else _lag_back(loop, change, applied_at)
    sized = next((t for t, a in loop.acks if sent and a.control_id == sent[-1][1].control_id
                  and a.outcome is Outcome.APPLIED), None)
    caught_up = None if name in START_UNITS else _caught_up(loop, applied_at)
    return Run(
        scenario=name, capacity_per_s=round(capacity, 1), tuples=len(sent),
        change_to_tuple_s=_round(first[0] - change if first else None),
        tuple_to_applied_s=_round(applied[0] - first[0] if applied and first else None),
        pause_s=_round(applied[1].pause_ms / 1000 if applied else None),
        change_to_recovered_s=_round(recovered - change if recovered else None),
        targets=tuple(d.target_value for _, d in sent),
        change_to_sized_s=_round(sized - change if sized else None),
        applied_detail=applied[1].detail if applied else None,
        reasons=tuple(_why(t - change, d) for t, d in sent),
        change_to_caught_up_s=_round(caught_up - change if caught_up else None))


def _why(after_change_s: float, decision: Decision) -> str:
    figures = ", ".join(f"{k}={v:.4g}" for k, v in sorted(decision.figures.items()))
    return (f"+{after_change_s:.1f} s {decision.current_value} → {decision.target_value}: "
            f"{decision.reason} [{figures}]")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _median(values: list[float | None]) -> float | None:
    """The median of the runs that have the figure (a run without it, e.g. one that never
    got its lag back, is left out; its own row in `all_runs` says None)."""
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 1) if known else None


def summary(runs: list[Run]) -> list[dict[str, Any]]:
    """Per scenario: the medians over its runs, and how many tuples each run sent."""
    rows = []
    for name in SCENARIOS:
        mine = [r for r in runs if r.scenario == name]
        if mine:
            rows.append({"scenario": name, "runs": len(mine),
                         "tuples": [r.tuples for r in mine],
                         **{k: _median([getattr(r, k) for r in mine])
                            for k in ("change_to_tuple_s", "tuple_to_applied_s", "pause_s",
                                      "change_to_recovered_s", "change_to_caught_up_s",
                                      "change_to_sized_s")}})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each scenario")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help="comma-separated, of: " + ", ".join(SCENARIOS) + " (none: '')")
    parser.add_argument("--by-hand", nargs="+", type=_units, default=[], metavar="UNITS",
                        help="the step without a controller, the size set by the benchmark")
    args = parser.parse_args()
    names = [n for n in args.scenarios.split(",") if n]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {sorted(SCENARIOS)}")
    load_before = record.load_average()
    runs: list[Run] = []
    by_hand: list[Run] = []
    with local_broker() as bed:
        for n in range(args.runs):  # alternating, so that the machine's drift biases none
            for name in names:
                run = run_scenario(name, bed.bootstrap_servers, bed.workdir / f"{name}-{n}")
                print(f"  {name} #{n + 1}: {run}", flush=True)
                runs.append(run)
            for units in args.by_hand:
                run = run_by_hand(units, bed.bootstrap_servers, bed.workdir / f"{units}-{n}")
                print(f"  step set by hand to {units} #{n + 1}: {run}", flush=True)
                by_hand.append(run)
    previous = _previous()
    rows, all_runs = kept_beside(summary(runs), [asdict(r) for r in runs], previous)
    hand_rows, hand_runs = by_hand_kept_beside(by_hand_summary(by_hand),
                                               [asdict(r) for r in by_hand], previous)
    print(f"\n{'scenario':<8} {'runs':>4} {'tuples':>10} {'→ tuple s':>9} {'→ applied s':>11} "
          f"{'pause s':>7} {'→ recovered s':>13} {'→ caught up s':>13} {'→ sized s':>9}")
    for row in rows:
        print(f"{row['scenario']:<8} {row['runs']:>4} {row['tuples']!s:>10} "
              f"{_text(row['change_to_tuple_s']):>9} {_text(row['tuple_to_applied_s']):>11} "
              f"{_text(row['pause_s']):>7} {_text(row['change_to_recovered_s']):>13} "
              f"{_text(row.get('change_to_caught_up_s')):>13} "
              f"{_text(row['change_to_sized_s']):>9}")
    for row in hand_rows:
        print(f"step, {row['units']} units by hand at +{row['change_to_tuple_s']} s: "
              f"→ lag back {_text(row['change_to_recovered_s'])} s, "
              f"→ caught up {_text(row['change_to_caught_up_s'])} s")
    record.write("reaction", {"runs": args.runs, "batch_cap": BATCH_CAP,
                              "change_at_s": CHANGE_AT_S, "targets": TARGETS,
                              "summary": rows, "all_runs": all_runs, "by_hand": hand_rows,
                              "by_hand_runs": hand_runs},
                 load_before)
    return 0


def by_hand_summary(runs: list[Run]) -> list[dict[str, Any]]:
    """Per size set by hand: the medians over its runs."""
    sizes = sorted({int(r.targets[0]) for r in runs})
    return [{"units": units, "runs": len(mine),
             "applied": sum(1 for r in mine if r.tuple_to_applied_s is not None),
             **{k: _median([getattr(r, k) for r in mine])
                for k in ("change_to_tuple_s", "tuple_to_applied_s", "pause_s",
                          "change_to_recovered_s", "change_to_caught_up_s")}}
            for units in sizes for mine in [[r for r in runs if r.targets == (str(units),)]]]


def _units(text: str) -> int:
    units = int(text)
    if units < 1:
        raise argparse.ArgumentTypeError(f"{text}: units are at least 1")
    return units


def _previous() -> dict[str, Any] | None:
    path = record.RESULTS_DIR / "reaction.json"
    return json.loads(path.read_text()) if path.exists() else None


Rows = list[dict[str, Any]]


def kept_beside(rows: Rows, runs: Rows, previous: dict[str, Any] | None) -> tuple[Rows, Rows]:
    """This run's rows, each stamped with when and how it was measured, and from `previous`
    (the results file) the scenarios this run did not measure, with their own stamps: a run of
    some scenarios updates their rows and keeps the others (`bench.report` shows each row's
    date). Rows of a file measured with another batch cap or change time are not kept."""
    order = list(SCENARIOS)
    return _kept(rows, runs, previous, ("summary", "all_runs"), lambda row: row["scenario"],
                 lambda run: run["scenario"], lambda row: order.index(row["scenario"]))


def by_hand_kept_beside(rows: Rows, runs: Rows,
                        previous: dict[str, Any] | None) -> tuple[Rows, Rows]:
    """`kept_beside` for the sizes set by hand: a run of some sizes updates theirs."""
    return _kept(rows, runs, previous, ("by_hand", "by_hand_runs"),
                 lambda row: str(row["units"]), lambda run: run["targets"][0],
                 lambda row: row["units"])


def _kept(rows: Rows, runs: Rows, previous: dict[str, Any] | None, keys: tuple[str, str],
          row_key: Callable[[dict[str, Any]], str], run_key: Callable[[dict[str, Any]], str],
          order: Callable[[dict[str, Any]], int]) -> tuple[Rows, Rows]:
    """`rows` stamped now, and those of `previous[keys[0]]` (and their runs, in
    `previous[keys[1]]`) whose key this run did not measure, when measured alike."""
    now = record.stamp("reaction")
    rows = [{**row, **now} for row in rows]
    if (previous is None or previous.get("batch_cap") != BATCH_CAP
            or previous.get("change_at_s") != CHANGE_AT_S):
        return rows, runs
    rows_at, runs_at = keys
    measured = {row_key(row) for row in rows}
    kept = [{"measured_at": previous.get("measured_at"), "command": previous.get("command"), **row}
            for row in previous.get(rows_at, []) if row_key(row) not in measured]
    return (sorted([*rows, *kept], key=order),
            [*runs, *(r for r in previous.get(runs_at, []) if run_key(r) not in measured)])


def _text(value: object) -> str:
    return "—" if value is None else f"{value}"


if __name__ == "__main__":
    raise SystemExit(main())
