"""Three units at a time on two cores (pytest-xdist), a fourth worker for the units that wait,
and the tests that measure a capacity first.

`./dev test` runs the suite on four xdist workers (`-n 4 --dist loadscope`): three take the
shared units, which wait on sessions, timeouts and brokers as much as they compute (two at a
time left the machine 80 % busy there, 92 % with three), and the fourth, the waiter, takes only
the `IDLE` ones (`WORKERS_BESIDE_THE_WAITER`). This plugin decides what goes together, in which
order, and what may run beside what:

- `CAPACITY`: modules whose tests step their load relative to a capacity they measured
  first. A busy test on another worker starting or ending mid-run would change that capacity
  under them, so they form one unit of work (one worker runs them one after another) that
  runs ahead of everything else, fixtures included: its worker and all it starts in a cpu
  cgroup that outweighs every session (`tests/support/ahead.py`), so the CPU they want is
  theirs and the other units get what they leave (about half the machine: its tests spend
  much of their time waiting at a steady load). Where no such cgroup can be made, it holds
  the machine exclusively instead.
- `IDLE`: modules whose tests mostly wait (group sessions, timeouts, a consumer's poll, a
  broker outage), measured at about a tenth of the machine's CPU or less, their brokers'
  start included (`test_broker_outage`: 12 core-seconds in 42 s; it has the restartable
  broker to itself when the `SHARED` unit that stops it runs on another worker). They take
  no lock, so they run beside a `CAPACITY` test even where that holds the machine, on the
  waiter (the others take them only when nothing else is left).
- Every other unit holds the machine shared while it runs: up to three of them at a time.

A module is one unit of work (its module-scoped fixtures start once); modules that share a
costly session fixture are one unit (`SHARED`), so another worker does not start a second
three-node cluster. The queue runs the long units first and the unit tests last, where they
fill the gap the last long unit leaves. Units are named by module path because xdist's
scheduler sees only test ids (and xdist's own `xdist_group` marks are lost under pytest 9.2:
pytest-dev/pytest-xdist#1386). Without xdist (a plain `pytest`) none of this applies.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

from tests.support.ahead import Ahead

CAPACITY = frozenset({
    "tests/e2e/test_closed_loop.py",
    "tests/e2e/test_closed_loop_fraud.py",
    "tests/e2e/test_closed_loop_scale_down.py",
    "tests/e2e/test_pipeline.py",
})

CAPACITY_UNIT = "capacity"

IDLE = frozenset({
    "tests/integration/test_broker_outage.py",
    "tests/integration/test_control_consumer.py",
    "tests/integration/test_controller_kafka.py",
    "tests/integration/test_controller_leadership.py",
    "tests/integration/test_exactly_once_sink.py",
    "tests/integration/test_kafka_tools.py",
    "tests/integration/test_replay_topic.py",
    "tests/integration/test_tail.py",
    "tests/integration/test_watch_commands.py",
})

SHARED = {
    "tests/faults/test_cluster_faults.py": "kafka-cluster",
    "tests/integration/test_local_cluster.py": "kafka-cluster",
    "tests/deploy/test_compose_local.py": "spark-cluster",
    "tests/deploy/test_spark_metrics_local.py": "spark-cluster",
    "tests/spark/test_executors_standalone.py": "spark-cluster",
    "tests/spark/test_cluster_division.py": "spark-cluster",
    "tests/faults/test_broker_restart.py": "restartable-broker",
    "tests/integration/test_local_broker.py": "restartable-broker",
}
"""Modules that share a session fixture too costly to start on both workers (a three-node
Kafka cluster, a Spark master and worker, a broker that tests stop and restart)."""

LONG_FIRST = ("tests/faults", "tests/spark", "tests/deploy", "tests/e2e", "tests/integration")
"""Queue order of the other directories, longest modules first (measured one at a time: faults
2–3.5 min a module, spark and deploy up to 1.5); any other directory, `tests/unit`
included, comes last."""


WORKERS_BESIDE_THE_WAITER = 3
"""Workers that take every unit; one more (`./dev test` runs four) is the waiter, which takes
only `IDLE` units: they wait more than they compute, so run beside the others they cost the
suite little CPU and none of the other workers' time."""


def _takes(waiter: bool, scope: str) -> bool:
    """Whether a worker takes unit `scope`: the waiter only `IDLE` ones, the others the rest."""
    return (scope in IDLE) == waiter


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def unit_of_work(nodeid: str) -> str:
    module = _module(nodeid)
    return CAPACITY_UNIT if module in CAPACITY else SHARED.get(module, module)


def _queue_rank(item: pytest.Item) -> tuple[int, int]:
    module = _module(item.nodeid)
    if module in CAPACITY:
        return (0, 0)
    if module in IDLE:
        return (1, 0)
    directory = next((d for d in LONG_FIRST if module.startswith(f"{d}/")), None)
    return (2, len(LONG_FIRST) if directory is None else LONG_FIRST.index(directory))


class ModuleUnits(LoadScopeScheduling):
    """xdist's scope scheduling, with `unit_of_work` as the scope, and a unit bound to a worker
    as late as xdist allows."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of_work(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        """The next unit in the queue this worker may take (`_takes`); a waiter with none left
        stops."""
        waiter = self._waiter()
        takes = [scope for scope in self.workqueue
                 if waiter is None or _takes(node is waiter, scope)]
        if not takes and node is not waiter:
            takes = list(self.workqueue)  # only the waiter's are left: they run sooner here
        if not takes:
            node.shutdown()
            return
        work_unit = self.workqueue.pop(takes[0])
        self.assigned_work.setdefault(node, {})[takes[0]] = work_unit
        collection = self.registered_collections[node]
        node.send_runtest_some([collection.index(nodeid)
                                for nodeid, done in work_unit.items() if not done])

    def _waiter(self) -> WorkerController | None:
        """The worker kept for `IDLE` units: the last of `WORKERS_BESIDE_THE_WAITER` + 1 or
        more; None with fewer (a plain `-n 2` shares everything)."""
        if len(self.nodes) <= WORKERS_BESIDE_THE_WAITER:
            return None
        return max(self.nodes, key=lambda node: int(node.gateway.id.removeprefix("gw")))

    def _reschedule(self, node: WorkerController) -> None:
        """xdist gives a worker its next unit once two of its tests are left; a worker starting
        a two-test fault module (minutes each) then also holds the next one, which waits
        behind it while another worker goes free. Here a worker gets a unit only when it
        starts its last test (it runs a test once it knows the next, so one must be left)."""
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> ModuleUnits | None:
    return ModuleUnits(config, log) if config.getvalue("dist") == "loadscope" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On each worker: the order the scheduler queues the units in (a unit's place is its
    first test's). The sort is stable, so a module keeps its own order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_queue_rank)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Outside pytest-timeout's wrapper: the wait for the machine is not the test's time. The
    machine is held for a whole unit of work, not test by test: a module-scoped fixture's
    processes (a job, a controller) keep running between its tests."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        yield
        return
    unit = unit_of_work(item.nodeid)
    started = time.time()
    if _module(item.nodeid) not in IDLE and not _MACHINE.holds(unit):
        ahead = unit == CAPACITY_UNIT and _AHEAD.enter()
        _MACHINE.take(run_id, unit, exclusive=unit == CAPACITY_UNIT and not ahead)
    try:
        yield
    finally:
        if nextitem is None or unit_of_work(nextitem.nodeid) != unit:
            _end_unit()
        _TIMELINE.add(unit, started, time.time())


class _Timeline:
    """Each worker's units of work, first start to last end, in a file the controlling
    process names (`STREAMCTL_TEST_TIMELINE`) and sums up after the run: which worker ended
    last, and behind which units (where the suite's wall time goes, for `LONG_FIRST` and the
    queue's order)."""

    VARIABLE = "STREAMCTL_TEST_TIMELINE"

    def add(self, unit: str, started: float, ended: float) -> None:
        path = os.environ.get(self.VARIABLE)
        if path:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
            with open(path, "a") as timeline:  # a line is one write: workers do not interleave
                timeline.write(f"{worker}\t{unit}\t{started:.3f}\t{ended:.3f}\n")

    @staticmethod
    def summary(lines: list[str], shortest_s: float = 20.0) -> list[str]:
        """Per worker, the units of at least `shortest_s` in the order they ran, and when the
        worker's last test ended, seconds from the first test's start."""
        spans: dict[tuple[str, str], list[float]] = {}
        for line in lines:
            worker, unit, started, ended = line.split("\t")
            span = spans.setdefault((worker, unit), [float(started), float(ended)])
            span[0], span[1] = min(span[0], float(started)), max(span[1], float(ended))
        if not spans:
            return []
        zero = min(start for start, _ in spans.values())
        out = []
        for worker in sorted({w for w, _ in spans}):
            mine = sorted((start - zero, end - zero, unit)
                          for (w, unit), (start, end) in spans.items() if w == worker)
            long = "".join(f", {unit} {start:.0f}-{end:.0f}"
                           for start, end, unit in mine if end - start >= shortest_s)
            out.append(f"{worker} ended at {max(e for _, e, _ in mine):.0f} s{long}")
        return out


_TIMELINE = _Timeline()


def pytest_configure(config: pytest.Config) -> None:
    """On the controlling process of an xdist run: name the timeline file its workers (started
    after this) inherit."""
    if (config.getoption("dist", None) == "loadscope"
            and not os.environ.get("PYTEST_XDIST_WORKER")
            and _Timeline.VARIABLE not in os.environ):
        fd, path = tempfile.mkstemp(prefix="streamctl-tests-", suffix=".timeline")
        os.close(fd)
        os.environ[_Timeline.VARIABLE] = path


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    path = os.environ.get(_Timeline.VARIABLE)
    if not path or os.environ.get("PYTEST_XDIST_WORKER") or not os.path.exists(path):
        return
    lines = Path(path).read_text().splitlines()
    os.unlink(path)
    terminalreporter.section("units of work per worker (seconds from the start)")
    for line in _Timeline.summary(lines):
        terminalreporter.write_line(line)


def _end_unit() -> None:
    try:
        _stop_what_the_unit_started()
    finally:
        _MACHINE.release()
        _AHEAD.leave()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A unit cut short (`-x`, an interrupt) ends here, after the fixtures' teardown."""
    _end_unit()


_AT_UNIT_END: dict[str, Callable[[], object]] = {}


def at_unit_end(name: str, stop: Callable[[], object]) -> None:
    """Under `./dev test`, `stop` once the unit of work running now on this worker is done
    (once per `name`, however many of its tests ask): for a session fixture that no other
    unit uses (`SHARED`) and that its next user would start again. Idle, a broker still
    takes a few percent of a core, and a unit can end minutes before the session. Without
    xdist the tests of a unit need not run one after another, and nothing stops early."""
    if os.environ.get("PYTEST_XDIST_TESTRUNUID"):
        _AT_UNIT_END[name] = stop


def _stop_what_the_unit_started() -> None:
    """After the unit's last test and its module fixtures' teardown."""
    while _AT_UNIT_END:
        _AT_UNIT_END.popitem()[1]()


class _Machine:
    """A readers-writer lock between the workers of one run (flock on two files), held by
    one unit of work at a time on this worker. A worker passes the turnstile before it takes
    the machine shared; a waiting exclusive unit holds the turnstile until it is in, so the
    other workers cannot keep it out unit after unit."""

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory or Path(tempfile.gettempdir())
        self._unit: str | None = None
        self._machine: IO[str] | None = None

    def holds(self, unit: str) -> bool:
        return self._unit == unit

    def take(self, run_id: str, unit: str, exclusive: bool) -> None:
        if self._unit == unit:
            return
        self.release()
        base = self._directory / f"streamctl-tests-{run_id}"
        with open(f"{base}.turnstile", "a") as turnstile:
            machine = open(f"{base}.machine", "a")  # noqa: SIM115 - held until release()
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(machine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self._unit, self._machine = unit, machine

    def release(self) -> None:
        if self._machine is not None:
            self._machine.close()  # closing the file drops its lock
        self._unit = self._machine = None


_MACHINE = _Machine()
_AHEAD = Ahead()
