"""What the closed-loop tests share: the job and controller processes on the one process bed
(`tests.support.bed`: its environment and its watch), and the capacity a job showed.

Each test starts its own jobs (their options are the test's subject) with `run_loop` (one job)
or `run_jobs` (a pipeline); the controller is the same for all, with a shorter cooldown than
the default 30 s: one scale-up is expected, and a second one, if the first fell short, should
come within a test's budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from schemas import TaskMetrics
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.view import full_batch_rate
from tests.support.bed import Watch, bed_env

CONTROLLER_COOLDOWN_S = 20
BATCHES_AT_NEW_SIZE = 3
"""Batches a test lets a resized job run under its load before it stops the load."""


@contextmanager
def run_loop(bootstrap: str, topics: dict[str, str], job_args: Sequence[str],
             log_dir: Path) -> Iterator[list[Child]]:
    """The job (`job run` with `job_args`) on `topics`; the test starts the controller
    (`start_controller`, into the same list) once it has measured the job."""
    io = ["--input-topic", topics["input"], "--output-topic", topics["output"],
          "--dlq-topic", topics["dlq"]]
    with run_jobs(bootstrap, topics, {"job": [*io, *job_args]}, log_dir,
                  with_controller=False) as children:
        yield children


@contextmanager
def run_jobs(bootstrap: str, topics: dict[str, str], jobs: dict[str, Sequence[str]],
             log_dir: Path, controller_metrics_port: int = 0, *,
             with_controller: bool = True,
             metrics_endpoints: bool = False) -> Iterator[list[Child]]:
    """One `job run` process per entry of `jobs` (name → its options), then the controller
    (unless the test starts it later, `start_controller`, into the same list), all on the
    control-plane topics of `topics`; every process in the list stopped on the way out. The
    jobs serve no metrics endpoint, unless `metrics_endpoints`: then each serves the one it
    gets by default (9301, or a free port when that is taken)."""
    children: list[Child] = []
    endpoint = () if metrics_endpoints else ("--metrics-port", "0")
    try:
        for name, args in jobs.items():
            children.append(start_child(name, ["job", "run", *endpoint, *args],
                                        log_dir, bed_env(bootstrap, topics)))
        if with_controller:
            children.append(start_controller(bootstrap, topics, log_dir,
                                             controller_metrics_port))
        yield children
    finally:
        stop_all(children)


SENSOR_WINDOW_MS = 10_000
SENSOR_BATCH_CAP = 1500
CALIBRATION_BATCHES = 3
"""Batches' worth of records a test's calibration burst holds: the job's first batch of the
burst (its warm-up, left out) and at least two full ones."""


NOT_SHEDDABLE = ("--max-shed-fraction", "0")
"""A job whose every record the test accounts for exactly: the controller may not shed it,
which it would at a ceiling (a loaded machine can bring a job to its task slots)."""


def sensor_job(query_id: str, checkpoint_dir: Path, *, units: int = 2,
               trigger_s: int = 1, sheddable: bool = False) -> list[str]:
    """`job run` options of the sensor job as the closed-loop tests run it: 5 ms per record,
    batches of at most `SENSOR_BATCH_CAP`, 10 s windows with a 10 s watermark; not sheddable
    unless asked."""
    return [*(() if sheddable else NOT_SHEDDABLE),
            "--query-id", query_id, "--checkpoint-dir", str(checkpoint_dir),
            "--job", "sensor-averages", "--input-parallelism", str(units),
            "--max-offsets-per-trigger", str(SENSOR_BATCH_CAP),
            "--set", "enrichment_cost_ms=5", "--trigger-interval-s", str(trigger_s),
            "--set", f"window_s={SENSOR_WINDOW_MS // 1000}", "--set", "watermark_s=10"]


def start_controller(bootstrap: str, topics: dict[str, str], log_dir: Path,
                     metrics_port: int = 0, *options: str, name: str = "controller",
                     cooldown_s: float = CONTROLLER_COOLDOWN_S) -> Child:
    """A controller instance `name` on the loop's topics, with the tests' cooldown unless
    given, and `streamctl.options` (its log: `<name>.log`)."""
    return start_child(name, [
        "controller", "run", "--metrics-port", str(metrics_port), "--instance-id", name,
        "--cooldown-s", str(cooldown_s), *options], log_dir, bed_env(bootstrap, topics))


def capacity(samples: Sequence[TaskMetrics], batch_cap: int) -> float:
    """`view.full_batch_rate`, which must have a full batch to measure."""
    rate = full_batch_rate(samples, batch_cap)
    assert rate is not None, "no full batch to measure the capacity on"
    return rate


def sensor_capacity(bootstrap: str, topic: str, watch: Watch, ledger: Ledger) -> float:
    """The sensor job's records/s at its parallelism now: a burst of three batches' worth
    (sequence numbers apart from any load's), worked through before the controller starts.
    The job's first batch is left out (`full_batch_rate`); whatever share of the burst it
    took, the two after it are full."""
    burst = LoadSpec(bootstrap, topic, RateProfile("constant", 4000),
                     CALIBRATION_BATCHES * SENSOR_BATCH_CAP / 4000, start_seq=10**9)
    run_load(burst, ledger)
    watch.until(lambda: watch.lag_records() == 0 and bool(watch.view.samples), 240,
                "the calibration burst worked through")
    return capacity(watch.view.samples, SENSOR_BATCH_CAP)


def until_batches_at_new_size(watch: Watch, at_new_size: Callable[[TaskMetrics], bool]) -> None:
    """Until the (first) query committed BATCHES_AT_NEW_SIZE batches that `at_new_size` picks:
    the new size carrying the load, which the test keeps on meanwhile. An idle query's
    heartbeat (no batch id) is no batch."""
    def enough() -> bool:
        return sum(1 for m in watch.view.samples
                   if m.batch_id >= 0 and at_new_size(m)) >= BATCHES_AT_NEW_SIZE

    watch.until(enough, 60, f"{BATCHES_AT_NEW_SIZE} batches at the new size under the load")
