"""`python -m bench.day`: how good the decisions are over days of a day-shaped load.

In the simulator (`bench.sim`: the real control loop over simulated jobs and topics), three
days of a diurnal load (night at a quarter of the peak, noise, a slow drift upwards, a flash
crowd on the second day) through a two-job pipeline whose jobs state a delay objective, in two
shapes: a smooth day, and an office's (a steep rise in the morning). The controller runs twice
on each load, side by side: reacting only (`--no-anticipate`) and
with its defaults, which size ahead of a load that repeats (`controller.core.season`). Per day
and job: unit-seconds over an oracle that knows the load (`bench.day.measures`),
reconfigurations, reversals within ten minutes and the time a record waited longer than the
objective. Writes `bench/results/day.json`; `python -m bench.report --write` renders it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from bench import record
from bench.day.measures import JobDay, days_of
from bench.sim import profiles
from bench.sim.model import JobSpec
from bench.sim.policies import Ours
from bench.sim.run import Scenario, simulate
from controller.settings import ControllerSettings, SeasonSettings

OBJECTIVE_S = 30.0
"""Both jobs state `--max-delay-s 30`."""
NIGHT, PEAK = 300.0, 1200.0
"""records/s into the first job at the start and the middle of the first day."""
WARMUP_S = 600
TICK_S = 5.0
"""The controller decides every 5 simulated seconds (it polls every 0.5 s for real: a day's
decisions come at most a few seconds later here, and the run takes minutes, not hours)."""

FIRST = JobSpec(query_id="enrich", source_topic="events", sink_topic="enriched",
                rate_per_unit=200.0, selectivity=0.5, max_delay_s=OBJECTIVE_S)
"""The bundled job's cost (`bench.sim.model.JobSpec`'s defaults), passing on half its records:
1 200/s at the peak needs 6 units at full use."""
SECOND = replace(FIRST, query_id="aggregate", source_topic="enriched", sink_topic="totals",
                 rate_per_unit=120.0, selectivity=1.0)
"""A costlier stage on the first one's output: 600/s at the peak, 5 units at full use."""

POLICIES = {"reacting": False, "anticipating": True}
"""The controller's runs: `SeasonSettings.anticipate` off, and its default (on)."""


SHAPES = {"smooth": profiles.smooth_day, "office": profiles.office_day}
"""The days' shapes: a smooth rise to the peak half a day in, and a quiet night until the office
opens a third of the day in (a rise to 80 % of the peak within minutes)."""


def scenario(days: int, day_s: int, seed: int, shape: str = "smooth") -> Scenario:
    crowd = profiles.Crowd(at_s=WARMUP_S + day_s + day_s * 5 // 12, length_s=600, factor=2.5)
    load = profiles.day_shaped(NIGHT, PEAK, days, day_s, prefix_s=WARMUP_S, relative_sd=0.1,
                               drift_per_day=0.05, crowd=crowd, seed=seed, shape=SHAPES[shape])
    return Scenario(f"{shape} days", load, (FIRST, SECOND), duration_s=days * day_s,
                    warmup_s=WARMUP_S, backlog_target_s=OBJECTIVE_S, tick_s=TICK_S)


def settings(anticipate: bool, day_s: int) -> ControllerSettings:
    """The defaults, with the longest period the load may repeat with set to the day's length
    when a run compresses the day."""
    season = SeasonSettings(anticipate=anticipate,
                            season_max_period_s=max(float(day_s), 2 * 3600.0))
    return ControllerSettings(season=season)


def run(days: int, day_s: int, seed: int) -> list[dict[str, object]]:
    """Every shape under each controller, the same load for both."""
    runs = []
    for shape in SHAPES:
        chosen = scenario(days, day_s, seed, shape)
        for name, anticipate in POLICIES.items():
            began = time.monotonic()
            trace = simulate(chosen, Ours(settings(anticipate, day_s)), keep_metrics=False)
            per_day = days_of(trace, day_s)
            runs.append({"shape": shape, "policy": name,
                         "simulated_in_s": time.monotonic() - began,
                         "days": [[job.as_dict() for job in day] for day in per_day]})
            print(table(f"{shape} days, {name}", per_day), flush=True)
    return runs


def table(name: str, per_day: Sequence[Sequence[JobDay]]) -> str:
    """The run's figures as printed while the benchmark runs (`bench.report` renders the
    result's table for the docs)."""
    lines = [f"{name}: day | job | reconfigurations | scale-ups before a backlog | reversals ≤ "
             "10 min | unit-s over the oracle | time over the objective"]
    lines += [f"  {d} | {job.query_id} | {job.reconfigurations} | "
              f"{job.scale_ups_before_backlog} | {job.reversals} | "
              f"{job.over_oracle:.0%} | {job.over_objective_share:.2%}"
              for d, jobs in enumerate(per_day, 1) for job in jobs]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.day", description=__doc__)
    parser.add_argument("--days", type=int, default=3, help="simulated days (default 3)")
    parser.add_argument("--day-s", type=int, default=86_400,
                        help="seconds in a simulated day (default 86400; smaller compresses "
                             "the day, not the controller's own timings)")
    parser.add_argument("--seed", type=int, default=11, help="seed of the load's noise")
    args = parser.parse_args(argv)
    logging.getLogger("controller").setLevel(logging.ERROR)
    load_before = record.load_average()
    runs = run(args.days, args.day_s, args.seed)
    path = record.write("day", {
        "days": args.days, "day_s": args.day_s, "seed": args.seed, "objective_s": OBJECTIVE_S,
        "night_per_s": NIGHT, "peak_per_s": PEAK, "tick_s": TICK_S, "runs": runs,
    }, load_before, argv=sys.argv[1:] if argv is None else list(argv))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
