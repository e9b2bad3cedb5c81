"""The figures of a run of days: per day and job, against an oracle that knows the load.

Owns the oracle and the day's columns, so the table, the JSON and the tests agree on them:

- oracle units: per second, the fewest units with which the job, given exactly the load of
  that second (the profile times the selectivities upstream), runs batches short enough for
  its delay objective: a record waits at most two batch intervals (the one it arrived in and
  its own), so 2 × I ≤ the objective, where I = max(trigger, overhead / (1 − λ / (μ × units)))
  at the steady state, capped batches taking N / (μ × units) + overhead. It reconfigures for
  free every second, so no policy can do better: a lower bound.
- unit-seconds over the oracle: Σ units × seconds of the run over the oracle's, minus one.
- reconfigurations: control tuples sent to the job that day.
- reversals: changes of the job's size in the other direction than its previous change, less
  than `REVERSAL_S` after it.
- scale-ups before a backlog: tuples that raised the job's size, sent while its own backlog as
  the policy counts it (`run.Trace.waiting`: beyond what its batches read or gather as a
  matter of course) had stayed within the policy's noise floor
  (`PolicySettings.backlog_floor_records`) over the model's window before, in seconds of the
  controller's clock however compressed the day: sized on a forecast (an upstream's, or the
  repeating load's), not on its own falling behind. Over the window, not at the tick: the
  controller decides on what its batches showed before.
- time over the objective: seconds in which the job's backlog held more than the objective's
  worth of its nominal arrivals (`run.Scenario.backlog_target`: a record waited longer).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import cache
from itertools import pairwise

from bench.sim.model import JobSpec
from bench.sim.run import Scenario, Trace
from controller.settings import ModelSettings, PolicySettings
from schemas import ControlTuple

BACKLOG_FLOOR = PolicySettings().backlog_floor_records
LOOKBACK_S = ModelSettings().window_s
"""How long before a scale-up the job's backlog must have stayed within the floor for it to
come before a backlog: the model's window, all the controller's own figures stand on."""

REVERSAL_S = 600.0
"""A size change undone within ten minutes counts as a reversal."""


@dataclass(frozen=True)
class JobDay:
    query_id: str
    unit_s: float
    oracle_unit_s: float
    reconfigurations: int
    reversals: int
    over_objective_s: float
    seconds: float
    scale_ups_before_backlog: int = 0

    @property
    def over_oracle(self) -> float:
        return self.unit_s / self.oracle_unit_s - 1 if self.oracle_unit_s else math.inf

    @property
    def over_objective_share(self) -> float:
        return self.over_objective_s / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"over_oracle": self.over_oracle,
                               "over_objective_share": self.over_objective_share}


def oracle_units(spec: JobSpec, rate: float, partitions: int, objective_s: float) -> int:
    """The fewest units that keep `rate` within the objective (the job's most if none do)."""
    floor = spec.units(1, partitions, spec.task_slots)
    top = spec.units(spec.knob_max(), partitions, spec.task_slots)
    return next((n for n in range(floor, top + 1)
                 if _interval_s(spec, rate, n) * 2 <= objective_s), top)


def _interval_s(spec: JobSpec, rate: float, units: int) -> float:
    """A batch interval at the steady state of `rate` on `units` (infinite: it falls behind)."""
    capacity = spec.rate_per_unit * units
    if rate >= capacity:
        return math.inf
    interval = max(spec.trigger_s, spec.overhead_s / (1 - rate / capacity))
    most = max(spec.max_per_batch, spec.max_batch_cap)  # it sets the cap for free too
    if rate * interval <= most:
        return interval
    capped = most / capacity + spec.overhead_s
    return capped if most / capped > rate else math.inf


def days_of(trace: Trace, day_s: int, reversal_s: float = REVERSAL_S) -> list[list[JobDay]]:
    """Per day of the run, per job in pipeline order, its figures; a change undone within
    `reversal_s` is a reversal."""
    scenario = trace.scenario
    objective = scenario.backlog_target_s
    oracle = _oracle(scenario, objective)
    days = round(scenario.duration_s / day_s)
    return [[_job_day(trace, j, day, day_s, oracle, reversal_s)
             for j in range(len(scenario.jobs))] for day in range(days)]


def _job_day(trace: Trace, j: int, day: int, day_s: int, oracle: list[list[int]],
             reversal_s: float) -> JobDay:
    scenario, tick = trace.scenario, trace.scenario.tick_s
    query = scenario.jobs[j].query_id
    start = scenario.warmup_s + day * day_s
    ticks = [i for i, t in enumerate(trace.times_s) if start < t <= start + day_s]
    changes = list(_changes(trace, query))
    return JobDay(
        query_id=query, unit_s=sum(trace.units[query][i] for i in ticks) * tick,
        oracle_unit_s=float(sum(oracle[j][start:start + day_s])),
        reconfigurations=sum(1 for t, c in trace.controls
                             if c.query_id == query and start < t <= start + day_s),
        reversals=sum(1 for (t0, d0), (t1, d1) in pairwise(changes)
                      if start < t1 <= start + day_s and d0 != d1 and t1 - t0 < reversal_s),
        over_objective_s=sum(tick for i in ticks
                             if trace.backlog[query][i] > scenario.backlog_target(
                                 j, trace.times_s[i])),
        seconds=len(ticks) * tick,
        scale_ups_before_backlog=sum(1 for t, c in trace.controls
                                     if c.query_id == query and start < t <= start + day_s
                                     and _scale_up_before_backlog(trace, t, c)))


def _scale_up_before_backlog(trace: Trace, sent_s: float, control: ControlTuple) -> bool:
    """Whether `control`, sent at `sent_s`, raised its job's size (as the first tick after its
    ack shows) while the job's backlog beyond what its batches read had stayed within the
    noise floor for `LOOKBACK_S`."""
    query = control.query_id
    before = bisect_right(trace.times_s, sent_s) - 1
    since = min(bisect_left(trace.times_s, sent_s - LOOKBACK_S), before)
    acked_s = next((t for t, a in trace.acks if a.control_id == control.control_id), None)
    if (before < 0 or acked_s is None
            or max(trace.waiting[query][since:before + 1]) > BACKLOG_FLOOR):
        return False
    after = bisect_right(trace.times_s, acked_s)
    return after < len(trace.times_s) and trace.units[query][after] > trace.units[query][before]


def _changes(trace: Trace, query: str) -> Iterator[tuple[float, int]]:
    """(time, direction) of every change of the job's size."""
    units = trace.units[query]
    for i in range(1, len(units)):
        if units[i] != units[i - 1]:
            yield trace.times_s[i], 1 if units[i] > units[i - 1] else -1


def _oracle(scenario: Scenario, objective_s: float) -> list[list[int]]:
    """Per job, per second of the run, the oracle's units."""
    seconds = scenario.warmup_s + scenario.duration_s
    found = []
    share = 1.0
    for spec in scenario.jobs:
        @cache
        def units(rate: int, spec: JobSpec = spec) -> int:
            return oracle_units(spec, float(rate), scenario.source_partitions, objective_s)
        found.append([units(math.ceil(scenario.profile.rate_at(s) * share))
                      for s in range(seconds)])
        share *= spec.selectivity
    return found
