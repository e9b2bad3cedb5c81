"""Fixtures shared by every test tier.

Kafka (integration and e2e tiers): one real local broker per test session on free ports in a
temporary state dir (`kafka_broker`, `bootstrap_servers`), and uuid-named topics per test
(`new_topic`). The broker's Maven classpath cache is the project's own, so only the first
session ever pays for Maven. Add fixtures for other tiers in their own section below.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

from schemas import auth
from stack.broker import LocalBroker
from stack.defaults import default_state_dir
from stack.ports import find_free_ports
from stack.topics import TopicSpec, delete_topics, ensure_topics

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
    )
    broker.start(timeout_s=120.0)
    try:
        yield broker
    finally:
        broker.stop(timeout_s=30.0)


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_broker: LocalBroker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture
def new_topic(bootstrap_servers: str) -> Iterator[Callable[..., str]]:
    """Factory: `new_topic(partitions=1, config=None)` creates a fresh uuid-named topic."""
    created: list[str] = []

    def make(partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        name = f"test-{uuid.uuid4().hex[:12]}"
        spec = TopicSpec(name, partitions=partitions, config=dict(config or {}))
        ensure_topics(bootstrap_servers, [spec], timeout_s=30.0)
        created.append(name)
        return name

    yield make
    if created:
        delete_topics(bootstrap_servers, created, timeout_s=30.0)


@pytest.fixture
def restartable_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of the test's own, for tests that stop and restart it (never the session's)."""
    port, controller_port = find_free_ports(2)
    broker = LocalBroker(tmp_path_factory.mktemp("restartable-kafka"), port, controller_port,
                         maven_dir=default_state_dir() / "maven")
    broker.start(timeout_s=120.0)
    try:
        yield broker
    finally:
        broker.stop(timeout_s=30.0)
