"""Benchmark: the demo's load step, as `./dev demo` runs it, over several runs.

Each run is `streamctl demo` with its defaults, start to summary: the local broker, the bundled
sensor job (2 units, 5 ms per record) and the controller as separate processes, 150 records/s
stepping to 900 records/s 30 s into the load, 150 s of load. From each run's own narration
(`streamctl.narrate.StepFigures`): load step → first control tuple, → its ack applied, the
pause, → the job's lag back to its level before the step, and every tuple sent.

    .venv/bin/python -m bench.demo --runs 3

prints each run's narration and a table of medians, and writes `bench/results/demo.json`
(`bench.report` renders it into `docs/benchmarks.md`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict

from bench import record
from streamctl.cli import build_parser, prepare
from streamctl.demo import DemoSettings, play
from streamctl.narrate import StepFigures

JOB = "sensor-averages"


def measure(runs: int) -> list[StepFigures]:
    """`runs` demos with the defaults; raises when one ends before its load did."""
    prepare(build_parser().parse_args(["demo"]))  # the control key, as `streamctl demo`
    measured = []
    for n in range(1, runs + 1):
        print(f"--- demo run {n} of {runs}", flush=True)
        played = play(DemoSettings())
        if played.exit_code != 0 or played.figures is None:
            raise SystemExit(f"demo run {n} ended with exit code {played.exit_code}; its "
                             "processes' logs are in .streamctl/demo/logs/")
        measured.append(played.figures)
    return measured


def median(values: Sequence[float | None]) -> float | None:
    """The median of the runs where it happened (None: in none); `summary` says in how many."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summary(figures: Sequence[StepFigures]) -> dict[str, dict[str, float | int | None]]:
    """Per figure: its median over the runs where it happened, and in how many it did (a run
    whose lag never came back, or whose tuple was not applied, is not in the median)."""
    per_run: dict[str, list[float | None]] = {
        "step_to_tuple_s": [f.step_to_tuple_s for f in figures],
        "step_to_applied_s": [f.step_to_applied_s for f in figures],
        "pause_s": [None if f.pause_ms is None else f.pause_ms / 1000 for f in figures],
        "step_to_lag_back_s": [f.recovered_s[JOB] for f in figures],
        "tuples_after_step": [float(sum(1 for t in f.tuples if t.at_s > 0)) for f in figures],
    }
    return {name: {"median": median(values), "runs": sum(v is not None for v in values)}
            for name, values in per_run.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.demo", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="demo runs (default 3)")
    args = parser.parse_args(argv)
    load_before = record.load_average()
    figures = measure(args.runs)
    medians = summary(figures)
    for name, m in medians.items():
        value = m["median"]
        print(f"{name}: {'—' if value is None else f'{value:.1f}'} ({m['runs']} of {len(figures)} "
              "runs)")
    defaults = DemoSettings()
    record.write("demo", {
        "runs": [asdict(f) for f in figures], "median": medians, "job": JOB,
        "base_rate_per_s": defaults.base_rate_per_s, "peak_rate_per_s": defaults.peak_rate_per_s,
        "step_at_s": defaults.step_at_s, "duration_s": defaults.duration_s,
    }, load_before, argv=sys.argv[1:] if argv is None else list(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
