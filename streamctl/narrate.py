"""What `streamctl demo` prints while it runs: status lines per job, decisions and acks as they
happen, and a summary with the figures worth remembering.

Owns the load thread of a demo run and the narration of one or more jobs (a pipeline: one
status line per job, prefixed with its name). Reads the metrics, acks and decisions from a
`Tail`; never decides anything. Neighbours: `demo` (starts the broker, topics and processes,
then hands over to `Narrator`), `view` (the figures of one query).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from schemas import Ack, Decision, Outcome, TaskMetrics
from streamctl.loadgen import LoadSpec, new_ledger, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from streamctl.tail import Tail
from streamctl.view import HEADER, QueryView, status_line


@dataclass(frozen=True)
class Watched:
    """A job the demo follows: its query id and its input topic (for its true lag)."""

    query_id: str
    input_topic: str


FLOOR_S = 3.0
"""Lag, in seconds of input, that a micro-batch job always has (a trigger interval and a
batch): below it a job is not behind, whatever its lag was before the step."""


@dataclass
class Recovery:
    """When a job's lag, in seconds of input, came back to its level before the load step."""

    before_s: float = 0.0
    """The highest lag seen in the last seconds before the step."""
    recovered_s: float | None = None
    behind_since_step: bool = False

    def track(self, elapsed: float, step_at: float, lag_s: float) -> None:
        steady = max(self.before_s, FLOOR_S)
        if step_at - 10 <= elapsed < step_at:
            self.before_s = max(self.before_s, lag_s)
        elif elapsed >= step_at and self.recovered_s is None:
            if lag_s > 2 * steady:
                self.behind_since_step = True
            elif self.behind_since_step and lag_s <= 1.5 * steady:
                self.recovered_s = elapsed - step_at


@dataclass(frozen=True)
class SentTuple:
    """A control tuple the controller sent during the demo, and its ack; seconds from the load
    step."""

    at_s: float
    query_id: str
    control_id: str
    change: str
    """'input_parallelism 2 -> 6'."""
    applied_s: float | None = None
    """When its ack said it was applied (None: not yet, or it was not)."""
    pause_ms: int | None = None


@dataclass(frozen=True)
class StepFigures:
    """What a demo run measured of the loop's answer to the load step (times from the step;
    None: it did not happen). The summary prints them; `bench.demo` records them."""

    step_to_tuple_s: float | None
    """The first tuple sent after the step."""
    step_to_applied_s: float | None
    """That tuple's ack, applied."""
    pause_ms: int | None
    """That tuple's pause."""
    tuples: tuple[SentTuple, ...]
    """Every tuple of the run, the step's included."""
    recovered_s: dict[str, float | None]
    """Per job: when its lag was back to its level before the step (None: not yet, or it
    never fell behind: `fell_behind` tells which)."""
    fell_behind: dict[str, bool]
    parallelism: dict[str, int]
    """Per job, the knob it scales with at the end (0: it never reported)."""


@dataclass
class Narrator:
    """Drives the load and prints what happens, until the duration ends or a child dies."""

    profile: RateProfile
    load: LoadSpec
    jobs: Sequence[Watched]
    tail: Tail
    children: list[Child]
    status_every_s: float = 3.0
    ready_timeout_s: float = 120.0
    views: dict[str, QueryView] = field(init=False)
    events: list[str] = field(default_factory=list)
    load_started: float = 0.0
    tuples: list[SentTuple] = field(default_factory=list)
    recovery: dict[str, Recovery] = field(init=False)

    def __post_init__(self) -> None:
        self.views = {j.query_id: QueryView(j.query_id) for j in self.jobs}
        self.recovery = {j.query_id: Recovery() for j in self.jobs}

    def run(self) -> int:
        if not self._wait_for_jobs():
            return 1
        stop = threading.Event()
        ledger = new_ledger(self.load)
        loader = threading.Thread(target=run_load, args=(self.load, ledger, stop), daemon=True)
        self.load_started = time.monotonic()
        loader.start()
        p = self.profile
        print(f"load: {p.base_per_s:.0f} records/s, stepping to {p.peak_per_s:.0f}/s at "
              f"{p.start_s:.0f} s\n{self._prefix('')}{HEADER}")
        exit_code = 0
        try:
            if not self._narrate():
                exit_code = 1
        except KeyboardInterrupt:
            print("\ninterrupted; stopping")
            exit_code = 130  # the shell's convention for "stopped by a signal"
        finally:
            stop.set()
            loader.join(35)
        self._summary(ledger.acked, ledger.failed)
        return exit_code

    def _wait_for_jobs(self) -> bool:
        print("waiting for the jobs' first metrics (Spark starts in ~10-20 s)...")
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            self._consume()
            if all(v.samples for v in self.views.values()):
                return True
            if self._dead_child():
                return False
        silent = [q for q, v in self.views.items() if not v.samples]
        print(f"no metrics from {', '.join(silent)} within {self.ready_timeout_s:.0f} s; see "
              f"the logs in {self.children[0].log_path.parent}")
        return False

    def _narrate(self) -> bool:
        """Until the load's end (True), or until a child died (False)."""
        next_status = 0.0
        duration = self.load.duration_s
        while (elapsed := time.monotonic() - self.load_started) < duration:
            self._consume()
            if self._dead_child():
                return False
            if elapsed >= next_status:
                for job in self.jobs:
                    lag_end = self.tail.log_end_total(job.input_topic)
                    self._track(job.query_id, elapsed, lag_end)
                    line = status_line(elapsed, self.profile.rate_at(elapsed),
                                       self.views[job.query_id], lag_end)
                    print(self._prefix(job.query_id) + line, flush=True)
                next_status = elapsed + self.status_every_s
        return True

    def _track(self, query_id: str, elapsed: float, lag_end: int | None) -> None:
        """Note the lag (in seconds of input) before the step, and when it is back after."""
        view = self.views[query_id]
        lag_s = view.lag_records(lag_end) / max(view.arrival_per_s(), 1.0)
        self.recovery[query_id].track(elapsed, self.profile.start_s, lag_s)

    def _prefix(self, query_id: str) -> str:
        width = max(len(j.query_id) for j in self.jobs)
        return "" if len(self.jobs) == 1 else f"{query_id:<{width}}  "

    def _consume(self) -> None:
        for _topic, record in self.tail.poll(0.2):
            if isinstance(record, TaskMetrics) and record.query_id in self.views:
                self.views[record.query_id].add(record)
            elif isinstance(record, Decision):
                self._on_decision(record)
            elif isinstance(record, Ack):
                self._on_ack(record)

    def _on_decision(self, d: Decision) -> None:
        if d.action.startswith("ack_") or d.query_id not in self.views:
            return  # the controller logs acks as decisions too; the ack itself is shown
        elapsed = time.monotonic() - self.load_started
        if d.control_id:
            self.tuples.append(SentTuple(
                elapsed - self.profile.start_s, d.query_id, d.control_id,
                f"{d.parameter} {d.current_value} -> {d.target_value}"))
        who = f" {d.query_id}" if len(self.jobs) > 1 else ""
        if d.current_value and d.target_value:
            line = (f">>> decision at {elapsed:.0f} s:{who} {d.action} {d.parameter} "
                    f"{d.current_value} -> {d.target_value}: {d.reason}")
        else:  # advice (throttle, cannot_help, lost, ...) changes no knob of the job
            line = f">>> {d.action.replace('_', ' ')} at {elapsed:.0f} s:{who} {d.reason}"
        self._event(line)

    def _on_ack(self, a: Ack) -> None:
        if a.query_id not in self.views:
            return
        if a.outcome is Outcome.APPLIED:
            applied_s = time.monotonic() - self.load_started - self.profile.start_s
            self.tuples = [replace(t, applied_s=applied_s, pause_ms=a.pause_ms)
                           if t.control_id == a.control_id else t for t in self.tuples]
        who = f" {a.query_id}" if len(self.jobs) > 1 else ""
        self._event(f">>> ack:{who} {a.outcome.value.lower()} (pause {a.pause_ms} ms): "
                    f"{a.detail}")

    def _event(self, line: str) -> None:
        self.events.append(line)
        print(line, flush=True)

    def _dead_child(self) -> bool:
        for child in self.children:
            if not child.alive():
                print(f"the {child.name} exited unexpectedly; last lines of its log:\n"
                      f"{child.log_tail()}")
                return True
        return False

    def figures(self) -> StepFigures:
        first = next((t for t in self.tuples if t.at_s > 0), None)
        return StepFigures(
            None if first is None else first.at_s, None if first is None else first.applied_s,
            None if first is None else first.pause_ms,
            tuple(self.tuples), {q: r.recovered_s for q, r in self.recovery.items()},
            {q: r.behind_since_step for q, r in self.recovery.items()},
            {q: v.parallelism() for q, v in self.views.items()})

    def _summary(self, acked: int, failed: int) -> None:
        print("\nsummary")
        print(f"  records produced and acknowledged: {acked} ({failed} failed)")
        print(f"  decisions and acks: {len(self.events)}")
        for event in self.events:
            print(f"    {event}")
        figures = self.figures()
        if figures.step_to_tuple_s is not None:
            print(f"  load step -> first control tuple: {figures.step_to_tuple_s:.1f} s")
        if figures.step_to_applied_s is not None:
            print(f"  load step -> that tuple applied: {figures.step_to_applied_s:.1f} s")
        pauses = [f"{t.pause_ms} ms" for t in self.tuples if t.pause_ms is not None]
        if pauses:
            print(f"  reconfiguration pause(s): {', '.join(pauses)}")
        for job in self.jobs:
            self._job_summary(job)

    def _job_summary(self, job: Watched) -> None:
        view, r = self.views[job.query_id], self.recovery[job.query_id]
        lag = view.lag_records(self.tail.log_end_total(job.input_topic))
        arrival = view.arrival_per_s()
        behind = f" (about {lag / arrival:.1f} s of input)" if arrival > 0 else ""
        who = f"{job.query_id}: " if len(self.jobs) > 1 else ""
        recovered = ("; never fell behind" if not r.behind_since_step else
                     f"; lag back to its pre-step level {r.recovered_s:.0f} s after the step"
                     if r.recovered_s is not None else "; lag not back to its pre-step level")
        print(f"  {who}lag at the end: {lag} records{behind} at parallelism "
              f"{view.parallelism()}{recovered}")
        if len(self.jobs) == 1:
            print("  (a micro-batch job always trails by roughly one trigger interval plus "
                  "one batch)")
