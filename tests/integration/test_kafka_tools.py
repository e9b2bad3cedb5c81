"""Kafka's own command-line tools through `streamctl stack kafka`, on the session broker: the
console consumer with `--isolation-level read_committed` prints what a job committed and
nothing of an aborted transaction, as the docs tell users to check a job's output; `configs`
raises a topic's record limit and `delete-records` moves its log's start, as the docs tell
users to do for large records and for input they give up on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streamctl.security.kafka import client_config
from tests.support.kafka import produce, topic_config, watermarks
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def streamctl(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamctl", *args], capture_output=True,
                          text=True, timeout=90,
                          env={**os.environ, "STREAMCTL_BOOTSTRAP_SERVERS": bootstrap})


def test_the_console_consumer_reads_committed_records_only(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce(bootstrap_servers, topic, [b"plain-1"])
    aborted = Producer(client_config(bootstrap_servers, **{"transactional.id": topic}))
    aborted.init_transactions(30)
    aborted.begin_transaction()
    aborted.produce(topic, b"aborted")
    aborted.flush(10)
    aborted.abort_transaction(30)
    produce(bootstrap_servers, topic, [b"plain-2"])

    # Each reads as many records as it should see, then exits; the timeout only bounds a
    # reader that sees fewer (a group's join alone took over 5 s on a busy machine).
    committed = streamctl(bootstrap_servers, "stack", "kafka", "console-consumer",
                          "--topic", topic, "--from-beginning", "--isolation-level",
                          "read_committed", "--max-messages", "2", "--timeout-ms", "60000")
    everything = streamctl(bootstrap_servers, "stack", "kafka", "console-consumer",
                           "--topic", topic, "--from-beginning", "--max-messages", "3",
                           "--timeout-ms", "60000")
    assert committed.stdout.split() == ["plain-1", "plain-2"], committed.stderr
    assert everything.stdout.split() == ["plain-1", "aborted", "plain-2"], everything.stderr


def test_an_unknown_tool_is_refused_with_the_list(bootstrap_servers: str) -> None:
    result = streamctl(bootstrap_servers, "stack", "kafka", "console-reader")
    assert result.returncode == 2
    assert "invalid choice: 'console-reader'" in result.stderr and "console-consumer" in (
        result.stderr)


def test_configs_raises_a_topic_s_record_limit_and_delete_records_moves_its_log_start(
        bootstrap_servers: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic()
    produce(bootstrap_servers, topic, [b"r0", b"r1", b"r2"])
    altered = streamctl(bootstrap_servers, "stack", "kafka", "configs", "--alter",
                        "--entity-type", "topics", "--entity-name", topic,
                        "--add-config", "max.message.bytes=2000000")
    assert altered.returncode == 0, altered.stderr
    # A broker applies a change once the KRaft controller committed it: asked until it has.
    until(lambda: topic_config(bootstrap_servers, topic)["max.message.bytes"] == "2000000"
          or None, 30, f"{topic}'s new max.message.bytes")

    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps(
        {"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 2}]}))
    deleted = streamctl(bootstrap_servers, "stack", "kafka", "delete-records",
                        "--offset-json-file", str(offsets))
    assert deleted.returncode == 0, deleted.stderr
    assert watermarks(bootstrap_servers, topic) == {0: (2, 3)}
