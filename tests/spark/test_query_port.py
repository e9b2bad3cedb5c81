"""The query port's contract (tests/runtime_query_contract.py) against the real query,
`runtime.query.lifecycle.ElasticQuery`, on the session's Spark and the real broker: the fake the
protocol tests drive (`runtime.fakes.FakeQuery`) behaves like this."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming_jobs.api import Job, Json, Topics
from streaming_jobs.config import bind, grouped
from streaming_jobs.runtime.checkpoint.input_source import InputSources
from streaming_jobs.runtime.kafka import KafkaLogRanges
from streaming_jobs.runtime.query.lifecycle import ElasticQuery
from streaming_jobs.runtime.query.plan import Plan
from tests.runtime_query_contract import CONTRACT, QueryHarness
from tests.spark.conftest import SPARK_TASK_SLOTS
from tests.support.kafka import produce

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]


def build(spark: Any, source: Any, context: Any) -> Any:
    return source.selectExpr("id AS key", "word AS value")


WORDS = Job(name="words", build=build, input=Json("id string not null, word string"),
            topics=Topics("words", "words-out"))


class SparkHarness:
    timeout_s = 120.0

    def __init__(self, spark: Any, bootstrap: str, topics: dict[str, str], workdir: Path) -> None:
        self._bootstrap, self._input = bootstrap, topics["in"]
        self.other_output_topic = topics["out2"]
        config = bind(grouped(dict(
            bootstrap_servers=bootstrap, job="words", query_id=f"port-{uuid.uuid4().hex[:8]}",
            input_topic=topics["in"], output_topic=topics["out"], dlq_topic=topics["dlq"],
            checkpoint_dir=str(workdir / "checkpoint"), trigger_interval_s=0.5,
            task_slots=SPARK_TASK_SLOTS, metrics_port=0)), WORDS)
        self._offsets = KafkaLogRanges(bootstrap, config.security.kafka_security)
        inputs = InputSources(config.storage.checkpoint_dir, config.storage.input_source_path,
                              config.identity.query_id, self._offsets)
        inputs.resume(config.topics.input_topic)
        self.desired = config.initial_state()
        self.query = ElasticQuery(spark, Plan(WORDS), config, inputs, lambda *_: None,
                                  desired=self.desired)
        self._fed = 0

    def feed(self) -> None:
        first, self._fed = self._fed + 1, self._fed + 20
        produce(self._bootstrap, self._input, [json.dumps({"id": str(n), "word": "w"}).encode()
                                               for n in range(first, self._fed + 1)])

    def close(self) -> None:
        self.query.quiesce_and_stop(60)
        self.query.close()
        self._offsets.close()


@pytest.fixture
def harness(spark: Any, bootstrap_servers: str, new_topic: Callable[..., str],
            tmp_path: Path) -> Iterator[SparkHarness]:
    topics = {"in": new_topic(partitions=2), "out": new_topic(), "out2": new_topic(),
              "dlq": new_topic()}
    made = SparkHarness(spark, bootstrap_servers, topics, tmp_path)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("check", CONTRACT, ids=lambda c: c.__name__)
def test_the_real_query_keeps_the_port_contract(harness: QueryHarness,
                                                check: Callable[[QueryHarness], None]) -> None:
    check(harness)
