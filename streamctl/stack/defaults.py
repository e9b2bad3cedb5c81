"""Defaults of the embedded local stack: ports, environment variables, state dir, topic names.

Owns the names other components agree on when they run against the local stack (they read the
bootstrap address from `STREAMCTL_BOOTSTRAP_SERVERS`, not from here). Neighbours: `broker`
(ports, state dir), `cli` (everything), `topics` (the `TopicSpec` type).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from schemas import topics
from streamctl.stack.topics import TopicSpec

STATE_DIR_ENV = "STREAMCTL_STATE_DIR"
BOOTSTRAP_ENV = "STREAMCTL_BOOTSTRAP_SERVERS"

DEFAULT_PORT = 9092
"""The Kafka listener; the KRaft controller listener defaults to the next port up."""

METRICS_TOPIC = topics.METRICS
CONTROL_TOPIC = topics.CONTROL
ACKS_TOPIC = topics.ACKS
DECISIONS_TOPIC = topics.DECISIONS
LEASE_TOPIC = topics.LEASE
INPUT_TOPIC = "sensor-readings"
OUTPUT_TOPIC = "sensor-averages"
DEAD_LETTER_TOPIC = "sensor-readings.dlq"
STATE_TOPIC = topics.STATE
SINK_MARKERS_TOPIC = topics.SINK_MARKERS
FRAUD_INPUT_TOPIC = "card-transactions"
FRAUD_OUTPUT_TOPIC = "scored-transactions"
FRAUD_DEAD_LETTER_TOPIC = "card-transactions.dlq"

QUERY_IDS = ("sensor-averages", "fraud-detection")
"""The bundled jobs' default query ids (their names, `streaming_jobs.jobs`; a unit test keeps
them equal): the secured stack grants each one its transactional sink id."""

DEFAULT_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(METRICS_TOPIC, partitions=1),
    # Keyed <query>/<parameter> (a tuple's own knob) and compacted: the last tuple per key is
    # what a restarted controller resumes from. One partition, so a query's tuples keep their order.
    TopicSpec(CONTROL_TOPIC, partitions=1, config={"cleanup.policy": "compact"}),
    TopicSpec(ACKS_TOPIC, partitions=1),
    # Each job's desired state, keyed by query id: only the newest per query matters.
    TopicSpec(STATE_TOPIC, partitions=1, config={"cleanup.policy": "compact"}),
    TopicSpec(DECISIONS_TOPIC, partitions=1),
    # The controllers' lease: whoever a partition is assigned to leads that shard of the
    # queries. Never written to; one partition (one instance leads them all) unless
    # `stack topics --lease-partitions` asks for more.
    TopicSpec(LEASE_TOPIC, partitions=1),
    # Few partitions on purpose: Spark's minPartitions splits them, so the parallelism knob
    # is visible from 2 upward instead of being pinned by the topic layout.
    TopicSpec(INPUT_TOPIC, partitions=2),
    TopicSpec(OUTPUT_TOPIC, partitions=2),
    TopicSpec(DEAD_LETTER_TOPIC, partitions=1),
    # The fraud-detection job's (`--job fraud-detection`), keyed by account.
    TopicSpec(FRAUD_INPUT_TOPIC, partitions=2),
    TopicSpec(FRAUD_OUTPUT_TOPIC, partitions=2),
    TopicSpec(FRAUD_DEAD_LETTER_TOPIC, partitions=1),
    # The transactional sink's commit markers: only the last one per query id matters.
    TopicSpec(SINK_MARKERS_TOPIC, partitions=1, config={"cleanup.policy": "compact"}),
)


def repo_root() -> Path | None:
    """The source checkout this package lives in, or None when installed elsewhere."""
    candidate = Path(__file__).resolve().parents[2]
    return candidate if (candidate / "pyproject.toml").is_file() else None


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$STREAMCTL_STATE_DIR`, else `<repo>/.streamctl` (git-ignored), else `./.streamctl`."""
    env = os.environ if env is None else env
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]).expanduser().resolve()
    root = repo_root()
    return (root if root is not None else Path.cwd()) / ".streamctl"


def default_bootstrap_servers(env: Mapping[str, str] | None = None) -> str:
    """`$STREAMCTL_BOOTSTRAP_SERVERS`, else the default local listener."""
    env = os.environ if env is None else env
    return env.get(BOOTSTRAP_ENV) or f"127.0.0.1:{DEFAULT_PORT}"
