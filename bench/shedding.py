"""Benchmark: a job at its ceiling under twice its capacity, then the load falling.

The real sensor job (2 units, 1 s trigger, 5 ms per record, batches of at most 1 500) with
60 % of its sensors low priority (`--set low_priority_prefixes=sensor-00,sensor-01,sensor-02`
of the load's 50) and a bound on shedding of 0.9, and the real controller with a ceiling of
2 units (`--max-parallelism 2`: no more units to give it). After the job's capacity C is
measured: 0.4 C for 20 s, 2 C for 120 s (the overload), then 0.3 C for 180 s (the fall). Per
run, from the benchmark's own clock as the records arrive:

- overload → the shed tuple, the fraction it sets, → its ack;
- the backlog's growth (least squares of the lag, records/s) from the overload to the shed
  applied, and from 10 s after that to the fall: shedding should stop it growing;
- fall → shedding off (the ack of the tuple that sets 0), the lift steps, and how many
  scale-downs were sent before it (none, by design);
- the rows the job reported shed.

    .venv/bin/python -m bench.shedding --runs 1

prints each run and writes `bench/results/shedding.json` (`bench.report` renders it into
`docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import record
from bench.bed import local_broker
from bench.reaction import Loop
from controller.settings import PolicySettings
from schemas import Outcome, TaskMetrics
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.profiles import RateProfile

LOW_PRIORITY = "sensor-00,sensor-01,sensor-02"
MAX_SHED_FRACTION = 0.9
QUIET_S, OVERLOAD_S, FALLEN_S = 20.0, 120.0, 180.0
OVERLOAD, FALLEN, QUIET = 2.0, 0.3, 0.4
"""The load's levels, times the job's capacity."""


@dataclass(frozen=True)
class Run:
    capacity_per_s: float
    overload_to_shed_s: float | None
    shed_to_applied_s: float | None
    first_fraction: float | None
    growth_before_per_s: float | None
    growth_shed_per_s: float | None
    fall_to_off_s: float | None
    fractions: tuple[float, ...]
    """Every shed fraction set, in order."""
    scale_downs_before_off: int
    rows_shed: int
    reasons: tuple[str, ...]


class ShedLoop(Loop):
    """The reaction benchmark's bed, also counting the rows each batch shed."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        super().__init__(bootstrap, workdir)
        self.shed_by_batch: dict[int, int] = {}

    def heard(self, at: float, metrics: TaskMetrics) -> None:
        if metrics.batch_id >= 0 and not metrics.beat:
            self.shed_by_batch[metrics.batch_id] = metrics.rows_shed


def run_once(bootstrap: str, workdir: Path) -> Run:
    loop = ShedLoop(bootstrap, workdir)
    try:
        loop.start_job(2, 1, "--set", f"low_priority_prefixes={LOW_PRIORITY}",
                       "--max-shed-fraction", str(MAX_SHED_FRACTION))
        capacity = loop.capacity()
        loop.start_controller("latest", "--max-parallelism", "2")
        profile = RateProfile("step", QUIET * capacity, OVERLOAD * capacity, QUIET_S)
        overload = LoadSpec(bootstrap, loop.topics["in"], profile, QUIET_S + OVERLOAD_S)
        fallen = LoadSpec(bootstrap, loop.topics["in"],
                          RateProfile("constant", FALLEN * capacity), FALLEN_S, start_seq=10**8)
        started = time.monotonic()
        _load(loop, overload, QUIET_S + OVERLOAD_S)
        fell = time.monotonic()
        _load(loop, fallen, FALLEN_S)
        loop.wait(lambda: bool(loop.view.samples) and loop.view.samples[-1].shed_fraction == 0,
                  120, "the shedding lifted")
        return _figures(loop, capacity, started + QUIET_S, fell)
    finally:
        loop.close()


def _load(loop: Loop, spec: LoadSpec, duration_s: float) -> None:
    thread = threading.Thread(target=run_load, args=(spec, Ledger(10_000)), daemon=True)
    thread.start()
    loop.wait(lambda: not thread.is_alive(), duration_s + 60, "the load")


def _figures(loop: ShedLoop, capacity: float, overloaded: float, fell: float) -> Run:
    sent = [(t, d) for t, d in loop.sent() if t >= overloaded]
    shed = [(t, d) for t, d in sent if d.parameter == "shed_fraction"]
    first = shed[0] if shed else None
    applied = _applied_at(loop, first[1].control_id) if first else None
    off = next(((t, d) for t, d in shed if t >= fell and float(d.target_value) == 0), None)
    off_at = _applied_at(loop, off[1].control_id) if off else None
    growth_before = _slope([(t, lag) for t, lag in loop.lags
                            if overloaded <= t <= (applied or fell)])
    growth_shed = (_slope([(t, lag) for t, lag in loop.lags if applied + 10 <= t <= fell])
                   if applied else None)
    downs = sum(1 for t, d in sent if d.action == "scale_down" and (off_at is None or t < off_at))
    rows_shed = sum(loop.shed_by_batch.values())
    return Run(
        capacity_per_s=round(capacity, 1),
        overload_to_shed_s=_round(first[0] - overloaded if first else None),
        shed_to_applied_s=_round(applied - first[0] if applied and first else None),
        first_fraction=float(first[1].target_value) if first else None,
        growth_before_per_s=_round(growth_before), growth_shed_per_s=_round(growth_shed),
        fall_to_off_s=_round(off_at - fell if off_at else None),
        fractions=tuple(float(d.target_value) for _, d in shed),
        scale_downs_before_off=downs, rows_shed=rows_shed,
        reasons=tuple(f"+{t - overloaded:.1f} s {d.action} {d.parameter} → {d.target_value}: "
                      f"{d.reason}" for t, d in sent))


def _applied_at(loop: Loop, control_id: str | None) -> float | None:
    return next((t for t, a in loop.acks
                 if a.control_id == control_id and a.outcome is Outcome.APPLIED), None)


def _slope(points: list[tuple[float, int]]) -> float | None:
    if len(points) < 3 or len({t for t, _ in points}) < 2:
        return None
    return statistics.linear_regression([t for t, _ in points],
                                        [float(lag) for _, lag in points]).slope


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1, help="runs (default 1)")
    args = parser.parse_args()
    load_before = record.load_average()
    runs = []
    with local_broker() as bed:
        for n in range(args.runs):
            run = run_once(bed.bootstrap_servers, bed.workdir / f"shedding-{n}")
            print(f"  run {n + 1}: {run}", flush=True)
            runs.append(run)
    record.write("shedding", {
        "runs": [asdict(r) for r in runs], "overload": OVERLOAD, "fallen": FALLEN,
        "overload_s": OVERLOAD_S, "max_shed_fraction": MAX_SHED_FRACTION,
        "low_priority_sensors_share": 0.6,
        "scale_down_stabilisation_s": PolicySettings().scale_down_stabilisation_s}, load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
