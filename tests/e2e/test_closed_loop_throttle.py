"""The closed loop at the resource limit, end to end on real processes: broker, job, controller.

The controller may not give the sensor job more than the 2 units it runs (`--max-parallelism
2`: the operator's ceiling, as a cluster's size would be). The test measures the job's
capacity at 2 units first, then loads it at twice that for 30 s. No number of units the
controller may ask for keeps up, so it must not send a tuple; it must say so instead: a
`throttle` decision with the rate the producers may send and the share of records to shed,
both consistent with the capacity it measured. Once the load ends the backlog drains at 2
units and every record is accounted for exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from tests.accounting import assert_every_record_accounted_for, flush_last_windows
from tests.e2e.loop import (
    SENSOR_WINDOW_MS,
    LoopWatch,
    run_loop,
    sensor_capacity,
    sensor_job,
    start_controller,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

QUERY = "e2e-throttle"
LOAD_S = 30.0


@pytest.fixture
def job(bootstrap_servers: str, loop_topics: dict[str, str],
        tmp_path: Path) -> Iterator[list[Child]]:
    with run_loop(bootstrap_servers, loop_topics,
                  sensor_job(QUERY, tmp_path / "checkpoint"), tmp_path) as children:
        yield children


def test_at_its_ceiling_an_overloaded_job_gets_a_throttle_advice_and_no_tuple(
    bootstrap_servers: str, loop_topics: dict[str, str], job: list[Child], tmp_path: Path,
) -> None:
    t = loop_topics
    watch = LoopWatch(bootstrap_servers, t, QUERY, job)
    ledger = Ledger(SENSOR_WINDOW_MS)
    measured = sensor_capacity(bootstrap_servers, t["input"], watch, ledger)
    job.append(start_controller(bootstrap_servers, t, tmp_path, 0, "--max-parallelism", "2"))

    rate = 2 * measured
    load = threading.Thread(target=run_load, args=(
        LoadSpec(bootstrap_servers, t["input"], RateProfile("constant", rate, rate),
                 duration_s=LOAD_S), ledger))
    load.start()
    try:
        watch.until(lambda: any(d.action == "throttle" for d in watch.decisions),
                    LOAD_S + 60, "a throttle decision")
    finally:
        load.join(LOAD_S + 30)
    assert ledger.failed == 0

    throttle = next(d for d in watch.decisions if d.action == "throttle")
    f = throttle.figures
    assert throttle.query_id == QUERY and throttle.control_id is None  # advice: nothing sent
    assert "throttle the producers to" in throttle.reason and "max_parallelism" in throttle.reason
    assert 0 <= f["throttle_to"] < f["capacity_at_max"] < f["arrival_rate"], f
    assert f["shed_fraction"] == pytest.approx(1 - f["throttle_to"] / f["arrival_rate"], abs=0.05)
    assert 0.5 < f["capacity_at_max"] / measured < 2, (f["capacity_at_max"], measured)

    watch.until(lambda: watch.lag_records() == 0, 240, "the backlog to drain at 2 units")
    assert watch.sent() == [], [(d.action, d.target_value) for d in watch.sent()]
    flush_last_windows(bootstrap_servers, t["input"])
    assert_every_record_accounted_for(bootstrap_servers, t["output"], ledger)
    print(f"\ncapacity {measured:.0f}/s at 2 units (the ceiling); load {rate:.0f}/s; throttle "
          f"to {f['throttle_to']:.0f}/s or shed {f['shed_fraction']:.0%}: {throttle.reason}")
    watch.close()
