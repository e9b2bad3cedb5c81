"""The scenarios of `python -m bench.sim`: five load shapes on one job, a pipeline, and a step
on a stateful job scaled by its state partitions, locally and on a cluster.

Owns the numbers. The single job is the bundled job as measured (`model.JobSpec` defaults:
μ ≈ 200/s per unit, 1.5 s per batch, 4 000-record batches, a 2 s trigger, 2 partitions,
16 slots, parallelism 2, a 5 s restart). At 200/s it is comfortably sized at parallelism 2;
each shape moves the load from there. The pipeline has a cheap first stage, an expensive
middle one and a moderate last one, so after its load step the middle job is the bottleneck
and, while it is, it hides from the last job the load that will reach it. The stateful job
is the fraud job as measured: its scoring runs in the stateful operator, so it scales by its
state partitions.
"""

from __future__ import annotations

from dataclasses import replace

from bench.sim import profiles
from bench.sim.model import JobSpec
from bench.sim.run import Scenario

DURATION_S = 900
"""Recorded seconds per run, after the warm-up."""
BASE_RATE = 200.0
WARMUP_S = 120
CHANGE_S = WARMUP_S + 60
"""Every load change comes a minute after the policies start."""
PROFILE_S = WARMUP_S + DURATION_S

JOB = JobSpec(query_id="job", source_topic="in", sink_topic="out")


def single(name: str, profile: profiles.Profile) -> Scenario:
    return Scenario(name, profile, (JOB,), duration_s=DURATION_S, warmup_s=WARMUP_S)


def step_2x() -> Scenario:
    return single("step 2x", profiles.step(BASE_RATE, 2, CHANGE_S, PROFILE_S))


def step_4x() -> Scenario:
    return single("step 4x", profiles.step(BASE_RATE, 4, CHANGE_S, PROFILE_S))


def ramp() -> Scenario:
    return single("ramp 1x->4x over 300 s",
                  profiles.ramp(BASE_RATE, 4 * BASE_RATE, CHANGE_S, CHANGE_S + 300, PROFILE_S))


def spike() -> Scenario:
    return single("spike 5x for 30 s",
                  profiles.spike(BASE_RATE, 5 * BASE_RATE, CHANGE_S, 30, PROFILE_S))


def noisy() -> Scenario:
    return single("noisy steady state", profiles.noisy(BASE_RATE, 0.2, PROFILE_S, seed=7,
                                                            change_s=WARMUP_S))


PIPELINE_RATE = 100.0


def pipeline() -> Scenario:
    """a → b → c; after a 4× step all three need more, and b (μ 100/s per unit) most.

    While b is the bottleneck it passes on at most ~175/s, which c (μ 150/s per unit) handles
    at parallelism 2, so nothing in c's own metrics says it will need 4 units or more once b
    is fixed. Batches are capped at 2 000 records so that a saturated job's batches stay
    shorter than the controller's window allows (see docs/simulation.md).
    """
    stage = replace(JOB, max_per_batch=2000)
    first = replace(stage, query_id="a", source_topic="in", sink_topic="a-out",
                    rate_per_unit=200.0)
    middle = replace(stage, query_id="b", source_topic="a-out", sink_topic="b-out",
                     rate_per_unit=100.0)
    last = replace(stage, query_id="c", source_topic="b-out", sink_topic="out",
                   rate_per_unit=150.0)
    return Scenario("pipeline a->b->c, step 4x, bottleneck b",
                    profiles.step(PIPELINE_RATE, 4, CHANGE_S, PROFILE_S),
                    (first, middle, last), duration_s=DURATION_S, warmup_s=WARMUP_S)


FRAUD = replace(JOB, rate_per_unit=58.0, overhead_s=2.1, scaling_parameter="state_partitions",
                restart_s=8.0)
"""The fraud job (`bench/results/fraud_partitions.json`: 94, 147, 247 scored/s at 2, 4, 8 state
partitions with 1 000-record batches fit μ ≈ 58/s per state partition plus ≈ 2.1 s per batch;
measured with 10 ms of scoring per record while the load average was near 20). Its restart
includes the offline state repartition (4.1 s for 2 → 8 there; the sensor job's whole
state-partition change paused 3.7 s, docs/benchmarks.md): 8 s. Batches of 4 000, its default."""
STATEFUL_RATE = 50.0
"""About half of what 2 state partitions carry (~110/s): sized, not idle."""


def stateful_step() -> Scenario:
    return Scenario("stateful step 4x (state partitions)", profiles.step(
        STATEFUL_RATE, 4, CHANGE_S, PROFILE_S), (FRAUD,), duration_s=DURATION_S,
        warmup_s=WARMUP_S)


def stateful_step_on_a_cluster() -> Scenario:
    """The same step with 2 one-core executors running, up to 16: the slots run out first."""
    job = replace(FRAUD, task_slots=2, executor_cores=1, max_executors=16)
    return Scenario("stateful step 4x on a cluster of 2 executors", profiles.step(
        STATEFUL_RATE, 4, CHANGE_S, PROFILE_S), (job,), duration_s=DURATION_S,
        warmup_s=WARMUP_S)


def all_scenarios() -> list[Scenario]:
    return [step_2x(), step_4x(), ramp(), spike(), noisy(), pipeline(), stateful_step(),
            stateful_step_on_a_cluster()]
