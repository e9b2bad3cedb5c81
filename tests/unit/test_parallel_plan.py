"""How `./dev test` splits the suite between its workers (tests/support/parallel.py)."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from tests.support import ahead, parallel

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_the_plan_names_exists_and_none_is_both_capacity_and_idle() -> None:
    named = parallel.CAPACITY | parallel.IDLE | set(parallel.SHARED)
    assert sorted(m for m in named if not (ROOT / m).is_file()) == []
    assert parallel.CAPACITY.isdisjoint(parallel.IDLE)
    assert parallel.CAPACITY.isdisjoint(parallel.SHARED)


def test_capacity_measuring_modules_are_one_unit_and_modules_sharing_a_fixture_are_one() -> None:
    measuring = {parallel.unit_of_work(f"{m}::test_x") for m in parallel.CAPACITY}
    assert measuring == {parallel.CAPACITY_UNIT}
    assert parallel.unit_of_work("tests/faults/test_cluster_faults.py::test_a") == \
        parallel.unit_of_work("tests/integration/test_local_cluster.py::test_b[1]")
    assert parallel.unit_of_work("tests/unit/test_window.py::test_c") == "tests/unit/test_window.py"


def _hold_shared(directory: Path, held: Event) -> None:
    machine = parallel._Machine(directory)
    machine.take("run", "other-unit", exclusive=False)
    held.set()
    machine.release()


def test_an_exclusive_unit_keeps_the_other_worker_out_until_it_releases(tmp_path: Path) -> None:
    machine = parallel._Machine(tmp_path)
    machine.take("run", "capacity", exclusive=True)
    spawn = multiprocessing.get_context("spawn")  # a forked child would share the held lock
    held = spawn.Event()
    other = spawn.Process(target=_hold_shared, args=(tmp_path, held))
    other.start()
    try:
        assert not held.wait(1.0), "took the machine shared while it was held exclusively"
        machine.release()
        assert held.wait(10.0), "never took the machine after the exclusive unit released it"
    finally:
        machine.release()
        other.join(10.0)
        other.kill()


def test_what_a_unit_started_is_stopped_once_when_it_ends_and_only_under_xdist(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[str] = []
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    parallel.at_unit_end("cluster", lambda: stopped.append("plain pytest"))
    parallel._stop_what_the_unit_started()
    assert stopped == []  # without xdist the session's teardown stops it

    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run")
    for _ in range(3):  # every module of the unit asks
        parallel.at_unit_end("cluster", lambda: stopped.append("cluster"))
    parallel.at_unit_end("broker", lambda: stopped.append("broker"))
    parallel._stop_what_the_unit_started()
    parallel._stop_what_the_unit_started()  # the next unit's end: nothing left
    assert sorted(stopped) == ["broker", "cluster"]


class _Worker:
    """What the scheduler sees of an xdist worker: the test indices it was sent."""

    def __init__(self, name: str) -> None:
        self.gateway = argparse.Namespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


class _Config:
    option = argparse.Namespace(loadscopereorder=False)

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx"
        return [f"{self.workers}*popen"]


def _scheduled(collection: list[str], workers: int) -> tuple[parallel.ModuleUnits,
                                                              list[_Worker]]:
    scheduler = parallel.ModuleUnits(_Config(workers))  # type: ignore[arg-type]
    nodes = [_Worker(f"gw{n}") for n in range(workers)]
    for worker in nodes:
        scheduler.add_node(worker)  # type: ignore[arg-type]
        scheduler.add_node_collection(worker, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    return scheduler, nodes


def test_a_worker_gets_its_next_unit_only_when_it_starts_the_last_test_it_holds() -> None:
    collection = ["tests/faults/test_a.py::one", "tests/faults/test_a.py::two",
                  "tests/faults/test_b.py::one", "tests/faults/test_b.py::two",
                  "tests/spark/test_c.py::one"]
    scheduler, (first, second) = _scheduled(collection, 2)
    assert (first.sent, second.sent) == ([0, 1], [2, 3])  # not test_c beside a two-test unit

    scheduler.mark_test_complete(second, 2)  # second starts its last test: it gets test_c
    assert (first.sent, second.sent) == ([0, 1], [2, 3, 4])
    scheduler.mark_test_complete(first, 0)
    assert first.shutting_down and not second.shutting_down


def test_a_unit_run_ahead_has_what_it_started_and_starts_in_a_heavy_cgroup_then_all_back_home(
        ) -> None:
    home = ahead.cgroup_of(os.getpid())
    runner = ahead.Ahead()
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(subprocess.Popen(["sleep", "60"]))  # before: moved with the worker
        entered = runner.enter()
        started.append(subprocess.Popen(["sleep", "60"], start_new_session=True))
        group = ahead.cgroup_of(os.getpid())
        inside = [ahead.cgroup_of(p.pid) for p in started]
        weight = (group / "cpu.shares").read_text().strip() if group is not None else None
        runner.leave()
        if entered:  # where the cgroup can be made (root, cgroup v1): this machine
            assert group != home and inside == [group, group]
            assert weight == str(ahead.AHEAD_SHARES)
        else:
            assert group == home and inside == [home, home]
        assert [ahead.cgroup_of(p.pid) for p in started] == [home, home]
        assert ahead.cgroup_of(os.getpid()) == home
        assert group is None or group == home or not group.exists()
    finally:
        for process in started:
            process.kill()
            process.wait()
        runner.leave()


def test_the_timeline_sums_each_workers_units_from_first_start_to_last_end() -> None:
    lines = ["gw0\tcapacity\t100.0\t130.0", "gw1\ttests/unit/x.py\t101.0\t102.0",
             "gw0\tcapacity\t130.0\t160.0", "gw1\tkafka-cluster\t102.0\t190.0",
             "gw0\trestartable-broker\t160.0\t175.0"]
    assert parallel._Timeline.summary(lines) == [
        "gw0 ended at 75 s, capacity 0-60",  # 15 s of restartable-broker: under 20 s
        "gw1 ended at 90 s, kafka-cluster 2-90",
    ]


def test_a_fourth_worker_takes_only_the_waiting_modules_and_stops_when_none_is_left() -> None:
    waiting = sorted(parallel.IDLE)[:2]
    collection = [f"{waiting[0]}::one", "tests/faults/test_a.py::one",
                  "tests/faults/test_a.py::two", f"{waiting[1]}::one",
                  "tests/faults/test_b.py::one", "tests/faults/test_b.py::two",
                  "tests/spark/test_c.py::one", "tests/spark/test_d.py::one",
                  "tests/spark/test_e.py::one"]
    scheduler, (gw0, gw1, gw2, waiter) = _scheduled(collection, 4)
    # each busy worker one unit (two tests, or one and the next), the waiter both waiting ones
    assert (gw0.sent, gw1.sent, gw2.sent, waiter.sent) == ([1, 2], [4, 5], [6, 7], [0, 3])
    scheduler.mark_test_complete(waiter, 0)
    assert waiter.shutting_down and waiter.sent == [0, 3]  # test_e waits for a busy worker
    scheduler.mark_test_complete(gw2, 6)
    assert gw2.sent == [6, 7, 8] and not gw2.shutting_down


def test_with_three_workers_or_fewer_every_worker_takes_the_waiting_modules_too() -> None:
    waiting = sorted(parallel.IDLE)[0]
    collection = [f"{waiting}::one", "tests/faults/test_a.py::one", "tests/spark/test_c.py::one"]
    _, nodes = _scheduled(collection, 3)
    assert [w.sent for w in nodes] == [[0], [1], [2]]
