"""The figures of one run, as the scenario tables show them.

Owns the definitions, so the table, the JSON and the tests agree on them:

- actions: control tuples the policy sent.
- converge_s: from the scenario's load change until the last moment the run was not settled
  (a job's units changed, or a job's backlog was over its target); None when the run ends
  unsettled (still over target in the last tick).
- peak_backlog: the largest Σ backlog over the jobs, in records.
- over_target_s: seconds in which some job's backlog was over its target.
- resource_s: Σ units × seconds over the jobs (units: tasks that run at once, so parallelism
  below the partition count is not counted as a saving it is not).
- direction_changes: per job, how often the sign of successive changes flipped (up → down or
  down → up), summed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import pairwise

from bench.sim.run import Trace


@dataclass(frozen=True)
class Figures:
    scenario: str
    policy: str
    actions: int
    converge_s: float | None
    peak_backlog: int
    over_target_s: float
    resource_s: float
    direction_changes: int
    final_units: tuple[int, ...]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def figures(trace: Trace) -> Figures:
    scenario, queries = trace.scenario, list(trace.units)
    tick = scenario.tick_s
    over = [_over_target(trace, i) for i in range(len(trace.times_s))]
    unsettled = [t for i, t in enumerate(trace.times_s) if over[i] or _changed(trace, i)]
    last = unsettled[-1] if unsettled else scenario.profile.change_s
    converge = None if over[-1] else max(0.0, last - scenario.profile.change_s)
    return Figures(
        scenario=scenario.name, policy=trace.policy, actions=len(trace.controls),
        converge_s=converge,
        peak_backlog=max(sum(trace.backlog[q][i] for q in queries)
                         for i in range(len(trace.times_s))),
        over_target_s=sum(over) * tick,
        resource_s=sum(sum(trace.units[q]) for q in queries) * tick,
        direction_changes=sum(direction_changes(trace.units[q]) for q in queries),
        final_units=tuple(trace.units[q][-1] for q in queries))


def _over_target(trace: Trace, i: int) -> bool:
    t, scenario = trace.times_s[i], trace.scenario
    return any(trace.backlog[q][i] > scenario.backlog_target(j, t)
               for j, q in enumerate(trace.units))


def _changed(trace: Trace, i: int) -> bool:
    return i > 0 and any(trace.units[q][i] != trace.units[q][i - 1] for q in trace.units)


def direction_changes(units: list[int]) -> int:
    signs = [1 if b > a else -1 for a, b in pairwise(units) if b != a]
    return sum(1 for a, b in pairwise(signs) if a != b)
