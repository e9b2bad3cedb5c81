"""Fixtures shared by every test tier.

Kafka (integration and e2e tiers): one real local broker per test session on free ports in a
temporary state dir (`kafka_broker`, `bootstrap_servers`), and uuid-named topics per test
(`new_topic`). The broker's Maven classpath cache is the project's own, so only the first
session ever pays for Maven. Add fixtures for other tiers in their own section below.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from schemas import auth
from streamctl.stack.broker import LocalBroker
from streamctl.stack.cluster import LocalCluster
from streamctl.stack.defaults import default_state_dir
from streamctl.stack.tcp import find_free_ports, port_in_use
from streamctl.stack.topics import TopicSpec, delete_topics, ensure_topics
from tests.support.class_archive import broker_env, broker_java_options, use_archives
from tests.support.fault_bed import FaultBed
from tests.support.kafka import NewTopics, TopicReader
from tests.support.processes import children_of
from tests.support.spark_cluster import LocalSparkCluster, start_cluster

# Property tests check what holds, not how fast: Hypothesis's default 200 ms deadline per
# example failed them on a busy machine. Durations are the benchmarks' business.
hypothesis_settings.register_profile("streamctl", deadline=None)
hypothesis_settings.load_profile("streamctl")

pytest_plugins = ("tests.support.parallel",)  # three tests at a time under ./dev test


def pytest_configure() -> None:
    """Every Spark driver and every broker a fixture starts maps a class-data archive of its
    kind (`class_archive`).

    A SIGTERM'd run (a CI job's timeout, `kill`) unwinds like Ctrl-C: the fixtures stop the
    brokers, clusters and job processes they started (each in its own session) instead of
    leaving them running. The xdist controller passes the signal on to its workers (its
    child processes), where the fixtures run."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        signal.signal(signal.SIGTERM, _pass_on_to_workers)
        use_archives(default_state_dir())  # before the workers start: they inherit them
    else:
        signal.signal(signal.SIGTERM, _unwind_once)


UNWIND_BUDGET_S = 90.0
"""How long a SIGTERM'd run waits for its workers to stop what they started before it ends.
xdist kills a worker 10 s after the run ends (`NodeManager.EXIT_TIMEOUT`); a worker stopping
a job process and its session broker takes longer, and what it had not stopped yet (in a
session of its own) would outlive it."""


def _unwind_once(signum: int, _frame: object) -> None:
    """The first SIGTERM interrupts what runs; a repeat (a CI job's, the process group's)
    would interrupt the fixtures' teardown it started, which must run to its end."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _pass_on_to_workers(signum: int, _frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a repeat would cut this wait short
    workers = children_of(os.getpid())  # not the process group: that may hold the caller's
    for worker in workers:            # shell and tee
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGTERM)
    deadline = time.monotonic() + UNWIND_BUDGET_S
    while time.monotonic() < deadline and any(_own_sessions(w) for w in workers):
        time.sleep(0.2)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _own_sessions(pid: int) -> list[int]:
    """The children of `pid` that lead a session of their own: what a fixture started (a
    broker, a job), not the worker's own Spark gateway JVM, which ends with it."""
    leaders = []
    for child in children_of(pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if os.getsid(child) == child:
                leaders.append(child)
    return leaders

# --- Control key -------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def control_key_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Jobs refuse to start without the controller's key: every process a test starts (job,
    controller, demo) inherits this session's key file, unless the caller set a key already."""
    if os.environ.get(auth.KEY_ENV) or os.environ.get(auth.KEY_FILE_ENV):
        yield os.environ.get(auth.KEY_FILE_ENV, "")
        return
    path = str(auth.ensure_key_file(tmp_path_factory.mktemp("control-key") / "control.key"))
    os.environ[auth.KEY_FILE_ENV] = path
    try:
        yield path
    finally:
        os.environ.pop(auth.KEY_FILE_ENV, None)


# --- JVMs --------------------------------------------------------------------------------------

QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
"""Every JVM the suite starts (brokers, Spark drivers and clusters, job processes) compiles with
C1 only. They live for seconds to minutes, and on 2 cores the optimising compiler's threads
compete with the work under test: the two failover tests and the controller-recovery test
ran in 155 s instead of 193 s (this 2-core machine, one run after the other). Behaviour is
the same; peak speed is lower, which the capacity-relative tests measure before they step
the load."""


@pytest.fixture(scope="session", autouse=True)
def quick_jvm_start() -> Iterator[None]:
    before = os.environ.get("JDK_JAVA_OPTIONS")
    with _environ({"JDK_JAVA_OPTIONS": " ".join(o for o in (before, QUICK_JVM_OPTIONS) if o)}):
        yield


@contextlib.contextmanager
def _environ(changes: Mapping[str, str]) -> Iterator[None]:
    """This process's environment with `changes`, as it was again afterwards."""
    before = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# --- Kafka -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A running single-node broker for the whole session, stopped at the end."""
    port, controller_port = find_free_ports(2)
    broker = LocalBroker(
        tmp_path_factory.mktemp("kafka-state"),
        port,
        controller_port,
        maven_dir=default_state_dir() / "maven",
        env=broker_env(),
    )
    try:  # a run interrupted while the broker starts stops it too
        broker.start(timeout_s=120.0)
        yield broker
    finally:
        broker.stop(timeout_s=30.0)


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_broker: LocalBroker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def new_topics(bootstrap_servers: str) -> Iterator[NewTopics]:
    """Factory: a test's topics, created in one admin call and deleted after the test."""
    created: list[str] = []

    def make(config: Mapping[str, Mapping[str, str]] | None = None,
             **partitions: int) -> dict[str, str]:
        names = {role: f"test-{uuid.uuid4().hex[:12]}" for role in partitions}
        ensure_topics(bootstrap_servers, [
            TopicSpec(names[role], partitions=n, config=dict((config or {}).get(role, {})))
            for role, n in partitions.items()], timeout_s=30.0)
        created.extend(names.values())
        return names

    yield make
    if created:
        delete_topics(bootstrap_servers, created, timeout_s=30.0)


@pytest.fixture
def new_topic(new_topics: NewTopics) -> Callable[..., str]:
    """Factory: `new_topic(partitions=1, config=None)` creates one fresh uuid-named topic."""
    def make(partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        return new_topics(config={"topic": config or {}}, topic=partitions)["topic"]

    return make


@pytest.fixture
def topic_reader(bootstrap_servers: str) -> Iterator[Callable[[str], TopicReader]]:
    """Factory: `topic_reader(topic)` follows a topic from its start; closed after the test."""
    opened: list[TopicReader] = []

    def open_reader(topic: str) -> TopicReader:
        opened.append(TopicReader(bootstrap_servers, topic))
        return opened[-1]

    yield open_reader
    for reader in opened:
        reader.close()


def _stop_at_unit_end(name: str, stop: Callable[[], object]) -> None:
    # Imported here: the plugin module must be imported first by pytest (`pytest_plugins`),
    # which rewrites its asserts.
    from tests.support.parallel import at_unit_end

    at_unit_end(name, stop)


@pytest.fixture(scope="session")
def _kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    base = next(p for p in (find_free_ports(1)[0] for _ in range(50))
                if not any(port_in_use(p + i) for i in range(6)))
    with _environ(broker_java_options()):  # each node keeps the environment it was made in
        cluster = LocalCluster(tmp_path_factory.mktemp("kafka-cluster"), 3, base,
                               maven_dir=default_state_dir() / "maven")
    try:
        yield cluster
    finally:
        cluster.stop(timeout_s=30.0)


@pytest.fixture(scope="module")
def kafka_cluster(_kafka_cluster: LocalCluster) -> LocalCluster:
    """A local cluster of three KRaft nodes, laid out as `stack up --brokers 3 --port P` lays
    it out (so that command finds it running), for the tests of replication and broker
    faults: one per session, running when each module that asks for it starts, stopped once
    the unit of work that uses it is done (`parallel.at_unit_end`)."""
    _kafka_cluster.start(timeout_s=120.0)
    _stop_at_unit_end("kafka-cluster", _kafka_cluster.stop)
    return _kafka_cluster


@pytest.fixture(scope="session")
def _restartable_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    port, controller_port = find_free_ports(2)
    broker = LocalBroker(tmp_path_factory.mktemp("restartable-kafka"), port, controller_port,
                         maven_dir=default_state_dir() / "maven", env=broker_env())
    try:
        yield broker
    finally:
        broker.stop(timeout_s=30.0)


@pytest.fixture
def restartable_broker(_restartable_broker: LocalBroker) -> LocalBroker:
    """A second broker, never the session's, for tests that stop and restart it: one per
    session, running when each such test starts (started again if the last one left it
    stopped), stopped once the unit of work that uses it is done (`parallel.at_unit_end`)."""
    _restartable_broker.start(timeout_s=120.0)
    _stop_at_unit_end("restartable-broker", _restartable_broker.stop)
    return _restartable_broker


# --- Processes under faults, a Spark standalone cluster ----------------------------------------


@pytest.fixture
def bed(bootstrap_servers: str, new_topics: NewTopics, tmp_path: Path,
        request: pytest.FixtureRequest) -> Iterator[FaultBed]:
    """One fault bed per test (uuid topics, its own checkpoint); every process it started is
    stopped afterwards, whatever happened. A test that failed, its time budget included,
    prints its processes' last lines."""
    made = FaultBed.create(bootstrap_servers, new_topics, tmp_path)
    try:
        yield made
    finally:
        if request.node.stash.get(CALL_FAILED, False):
            print(made.process_logs())
        made.close()


CALL_FAILED = pytest.StashKey[bool]()
"""Set on a test item whose call phase failed (for fixtures that explain a failure)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        item.stash[CALL_FAILED] = True


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    """The compose file's Spark master and one worker (2 cores, 2 GiB), started once for every
    test that needs a standalone cluster; each test's application ends with the test."""
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()
