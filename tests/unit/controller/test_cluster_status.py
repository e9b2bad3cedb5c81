"""The shared cluster's free cores as the controller reads them from a Spark standalone
master's JSON status: the live workers' free cores, nothing from a standby master or a status
it cannot read, and a reading dropped once it is stale (`tests/spark/
test_executors_standalone` reads a real master)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

from controller.cluster_status import MasterStatus, StatusError, free_cores_of
from tests.support.waiting import until

STATUS = {"url": "spark://master:7077", "status": "ALIVE", "aliveworkers": 2, "cores": 6,
          "coresused": 3, "workers": [
              {"id": "w1", "cores": 2, "coresused": 2, "coresfree": 0, "state": "ALIVE"},
              {"id": "w2", "cores": 2, "coresused": 1, "coresfree": 1, "state": "ALIVE"},
              {"id": "w3", "cores": 2, "coresused": 0, "coresfree": 2, "state": "DEAD"}]}


def test_the_free_cores_are_those_of_the_live_workers() -> None:
    assert free_cores_of(STATUS) == 1


@pytest.mark.parametrize(("status", "says"), [
    ({**STATUS, "status": "STANDBY"}, "the master is STANDBY, not the alive one of its pair"),
    ({"status": "ALIVE"}, "the status has no 'workers' list"),
    ({"workers": [{"state": "ALIVE", "coresfree": "two"}]}, "a worker without a whole"),
])
def test_a_status_that_says_nothing_usable_is_refused_saying_why(
        status: Mapping[str, Any], says: str) -> None:
    with pytest.raises(StatusError, match=says):
        free_cores_of(status)


def test_a_failed_read_keeps_the_last_reading_until_it_is_three_intervals_old() -> None:
    now, answers = [0.0], [STATUS, OSError("connection refused"), {"status": "STANDBY"}]

    def fetch(url: str, timeout_s: float) -> Mapping[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    status = MasterStatus("http://master:8080/json/", 5.0, fetch=fetch, clock=lambda: now[0])
    assert status.free_cores() is None  # nothing read yet
    status.read_once()
    assert status.free_cores() == 1
    now[0] = 10.0
    status.read_once()
    status.read_once()
    assert status.free_cores() == 1
    now[0] = 15.1
    assert status.free_cores() is None


def test_a_want_has_the_status_read_once_the_collection_time_has_passed_not_an_interval_later(
        ) -> None:
    reads: list[float] = []

    def fetch(url: str, timeout_s: float) -> Mapping[str, Any]:
        reads.append(time.monotonic())
        return STATUS

    status = MasterStatus("http://master:8080/json/", 3600.0, 0.05, fetch=fetch).start()
    try:
        until(lambda: status.readings() == 1, 30.0, "the first reading, at start")
        asked = time.monotonic()
        status.read_soon()
        until(lambda: status.readings() == 2, 30.0, "a reading soon after the want, not in an hour")
        assert reads[1] >= asked + 0.05  # not before the other wants had their collection time
    finally:
        status.close()


def test_only_a_reading_begun_after_a_moment_passes_the_count_of_that_moment() -> None:
    during: list[int] = []

    def fetch(url: str, timeout_s: float) -> Mapping[str, Any]:
        during.append(status.reads_begun())  # an executors request applied mid-read
        return STATUS

    status = MasterStatus("http://master:8080/json/", 5.0, fetch=fetch)
    status.read_once()
    assert status.readings() <= during[0]  # under way then: it may not show the executors
    after = status.reads_begun()
    status.read_once()
    assert status.readings() > after
