"""Benchmark: docker-compose.yml in containers. `compose up` → the job running on the cluster,
a load step → the controller's tuple applied, and a crash of the active job → the promoted
standby's first batch.

Each run brings the stack up fresh as the container tier does (`bench.compose.stack.up`: a
Docker engine, the project image on a Debian base and stand-ins for the official images this
machine cannot pull; every service but Grafana: the broker, the Spark master and two workers,
the active job and its warm standby, two controller instances, Prometheus), measures the
job's capacity C with a burst of four full batches, then:

- a step from 0.4 C to 3 C: to the controller's first control tuple and to its ack (applied);
- under 0.3 C, SIGKILL of the active job's process from the host (a crash, which compose's
  restart policy answers): to the controller's failover decision and to the first batch with
  rows the promoted standby commits.

Every time runs from the change to the record's own stamp (the containers share this
machine's clock). Everything shares the machine's 2 cores: the engine, every container, the
load generator and this process.

    .venv/bin/python -m bench.containers --runs 3

prints a table and writes `bench/results/containers.json` (`bench.report` renders it into
`docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TypeVar

from bench import record
from bench.compose.stack import BOOTSTRAP, INPUT, QUERY, SERVICE_OF, Compose, up
from schemas import Ack, Decision, Outcome, Role, TaskMetrics, topics
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.profiles import RateProfile
from streamctl.tail import Tail
from streamctl.view import QueryView, full_batch_rate

BATCH_CAP = 4000
"""The job's default `max_offsets_per_trigger` (docker-compose.yml sets none)."""
STEADY_S, STEP_S = 10.0, 60.0
"""The step's load: 0.4 C for `STEADY_S`, then 3 C for `STEP_S`."""
T = TypeVar("T")

WAIT_S = 300.0
"""The longest any one stage may take before the run fails."""


@dataclass(frozen=True)
class Run:
    up_s: float
    """`compose up` → the job's application holding its executors on the workers."""
    capacity_per_s: float
    step_to_tuple_s: float
    step_to_applied_s: float
    applied: str
    """What the first tuple after the step changed."""
    applied_detail: str
    """Its ack's note: for `executors`, how many ran and when (or that the cluster had no room
    within the job's wait)."""
    crash_to_failover_s: float
    crash_to_first_batch_s: float


class StackWatch:
    """The compose query's batches, the controllers' decisions and the acks, as they arrive."""

    def __init__(self) -> None:
        self.view = QueryView(QUERY)
        self.decisions: list[Decision] = []
        self.acks: list[Ack] = []
        self.standby_beats: dict[str, int] = {}
        """Each standby instance's newest heartbeat stamp."""
        self._tail = Tail(BOOTSTRAP, {topics.METRICS: TaskMetrics, topics.DECISIONS: Decision,
                                      topics.ACKS: Ack},
                          from_beginning=True)

    def poll(self) -> None:
        for _topic, got in self._tail.poll(0.3):
            if not isinstance(got, TaskMetrics | Decision | Ack) or got.query_id != QUERY:
                continue
            if isinstance(got, TaskMetrics):
                self.view.add(got)
                if got.role is Role.STANDBY:
                    self.standby_beats[got.instance_id] = got.batch_end_ms
            elif isinstance(got, Decision):
                self.decisions.append(got)
            elif isinstance(got, Ack):
                self.acks.append(got)

    def wait(self, found: Callable[[], T | None], what: str) -> T:
        """Poll until `found()` gives something, at most `WAIT_S`."""
        deadline = time.monotonic() + WAIT_S
        while (value := found()) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {WAIT_S:.0f} s waiting for {what}")
            self.poll()
        return value

    def lag(self) -> int:
        return self.view.lag_records(self._tail.log_end_total(INPUT))

    def sent_after(self, at_ms: int, action: str | None = None) -> Decision | None:
        """The first decision after `at_ms` that sent a tuple (of `action`, if given)."""
        return next((d for d in self.decisions if d.control_id and d.decided_at_ms > at_ms
                     and not d.action.startswith("ack_") and action in (None, d.action)), None)

    def close(self) -> None:
        self._tail.close()


def now_ms() -> int:
    return int(time.time() * 1000)


@contextmanager
def load(profile: RateProfile, duration_s: float, start_seq: int,
         until_done: bool = False) -> Iterator[None]:
    """`profile` produced to the input in the background for a `with` block, stopped at its
    end, or (`until_done`) left to run its `duration_s` out."""
    stop = threading.Event()
    spec = LoadSpec(BOOTSTRAP, INPUT, profile, duration_s, start_seq=start_seq)
    thread = threading.Thread(target=run_load, args=(spec, Ledger(10_000), stop), daemon=True)
    thread.start()
    try:
        yield
    except BaseException:
        stop.set()  # a failed run waits for no load
        raise
    finally:
        if not until_done:
            stop.set()
        thread.join(duration_s + 60)


def capacity(watch: StackWatch) -> float:
    """The job's records/s at its starting size: a burst of four full batches."""
    burst = LoadSpec(BOOTSTRAP, INPUT, RateProfile("constant", 8000), 4 * BATCH_CAP / 8000,
                     start_seq=10**9)
    run_load(burst, Ledger(10_000))
    watch.wait(lambda: True if watch.view.samples and watch.lag() == 0 else None,
               "the calibration burst worked through")
    rate = full_batch_rate(watch.view.samples, BATCH_CAP)
    if rate is None:
        raise RuntimeError("no full batch in the calibration burst")
    return rate


def step(watch: StackWatch, c: float) -> tuple[float, float, str, str]:
    """0.4 C → 3 C: seconds from the step to the first tuple sent after it and to its applied
    ack, what it changed and the ack's note; then the load runs out and the backlog drains."""
    step_ms = now_ms() + int(STEADY_S * 1000)
    with load(RateProfile("step", 0.4 * c, 3 * c, start_s=STEADY_S), STEADY_S + STEP_S,
              start_seq=2 * 10**9, until_done=True):
        sent = watch.wait(lambda: watch.sent_after(step_ms), "a control tuple after the step")
        ack = watch.wait(lambda: next((a for a in watch.acks
                                       if a.control_id == sent.control_id), None),
                         f"the ack of tuple {sent.control_id} ({sent.action})")
        if ack.outcome is not Outcome.APPLIED:
            raise RuntimeError(f"tuple {sent.control_id} ({sent.action}) was not applied: "
                               f"{ack.outcome.value}: {ack.detail}")
    watch.wait(lambda: True if watch.lag() == 0 else None, "the backlog drained after the step")
    return ((sent.decided_at_ms - step_ms) / 1000, (ack.acked_at_ms - step_ms) / 1000,
            f"{sent.parameter} {sent.current_value} → {sent.target_value}", ack.detail)


def crash(compose: Compose, watch: StackWatch, c: float) -> tuple[float, float]:
    """Under 0.3 C, SIGKILL of the active's process: seconds to the failover decision and to
    the promoted standby's first batch with rows."""
    active = watch.view.samples[-1].instance_id
    [standby] = set(SERVICE_OF) - {active}
    beat_after = now_ms()
    watch.wait(lambda: True if watch.standby_beats.get(standby, 0) > beat_after else None,
               f"a heartbeat of the standby {standby}")
    container = compose.container(SERVICE_OF[active])
    with load(RateProfile("constant", 0.3 * c), 3600, start_seq=3 * 10**9):
        crash_ms = compose.crash(container)
        failover = watch.wait(lambda: watch.sent_after(crash_ms, "failover"),
                              "the controller's failover")
        first_ms = watch.wait(lambda: next((m.batch_end_ms for m in watch.view.samples
                                            if m.instance_id == standby and m.input_rows > 0
                                            and m.batch_end_ms > crash_ms), None),
                              f"a batch of the promoted standby {standby}")
    return (failover.decided_at_ms - crash_ms) / 1000, (first_ms - crash_ms) / 1000


def measure_once() -> Run:
    timings: dict[str, float] = {}
    with up(timings) as compose:
        watch = StackWatch()
        try:
            c = capacity(watch)
            to_tuple, to_applied, change, detail = step(watch, c)
            to_failover, to_first_batch = crash(compose, watch, c)
        finally:
            watch.close()
    return Run(round(timings["up → job running on the cluster"], 1), round(c),
               round(to_tuple, 1), round(to_applied, 1), change, detail,
               round(to_failover, 1), round(to_first_batch, 1))


FIGURES = ("up_s", "step_to_tuple_s", "step_to_applied_s", "crash_to_failover_s",
           "crash_to_first_batch_s")


def summary(runs: Sequence[Run]) -> dict[str, float]:
    return {name: round(statistics.median(getattr(r, name) for r in runs), 1)
            for name in FIGURES}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.containers", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="fresh stacks (default 3)")
    args = parser.parse_args(argv)
    load_before = record.load_average()
    runs = []
    for n in range(args.runs):
        runs.append(measure_once())
        print(f"run {n + 1}: {asdict(runs[-1])}", flush=True)
    medians = summary(runs)
    print(f"medians: {medians}")
    record.write("containers", {
        "runs": [asdict(r) for r in runs], "median": medians, "batch_cap": BATCH_CAP,
        "steady_s": STEADY_S, "step_s": STEP_S,
    }, load_before, argv=sys.argv[1:] if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
