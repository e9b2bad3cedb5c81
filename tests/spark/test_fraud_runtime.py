"""The fraud-detection job through the elastic runtime (registry → plan → transactional sink)
on a real broker, fed by the load generator's card transactions: a read_committed consumer
sees every acknowledged transaction scored exactly once, each account's count continuous."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from schemas.codec import codec_for
from schemas.records import TaskMetrics
from streamctl.cards import CardLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.profiles import RateProfile
from streaming_jobs.config import JobConfig
from tests.accounting import assert_every_transaction_scored_once
from tests.spark.conftest import SPARK_TASK_SLOTS
from tests.spark.fraud_io import fraud_config, fraud_job, read_committed

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(420)]


@pytest.fixture
def config(bootstrap_servers: str, new_topic: Callable[..., str], tmp_path: Path) -> JobConfig:
    return fraud_config(
        bootstrap_servers=bootstrap_servers,
        query_id=f"fraud-{uuid.uuid4().hex[:8]}", instance_id="test-instance",
        input_topic=new_topic(partitions=2), output_topic=new_topic(partitions=2),
        dlq_topic=new_topic(), metrics_topic=new_topic(), control_topic=new_topic(),
        ack_topic=new_topic(), checkpoint_dir=str(tmp_path / "checkpoint"),
        input_parallelism=2, max_offsets_per_trigger=300, trigger_interval_s=0.5,
        enrichment_cost_ms=1.0, watermark_s=30, task_slots=SPARK_TASK_SLOTS, metrics_port=0,
        control_key=b"fraud-runtime-test-control-key")


@pytest.fixture
def running_job(spark: object, config: JobConfig) -> Iterator[object]:
    from streaming_jobs.runtime.job import ElasticJob

    job = ElasticJob(fraud_job, config, spark=spark)  # type: ignore[arg-type]
    job.start()
    yield job
    job.stop()


def test_every_acknowledged_transaction_is_scored_once(running_job: object,
                                                       config: JobConfig) -> None:
    spec = LoadSpec(config.bootstrap_servers, config.input_topic,
                    RateProfile("constant", 300.0), duration_s=4.0, event_type="card",
                    accounts=15, hot_key_share=0.3)
    ledger = run_load(spec, CardLedger())
    assert isinstance(ledger, CardLedger) and ledger.failed == 0 and ledger.acked > 600

    assert_every_transaction_scored_once(config.bootstrap_servers, config.output_topic, ledger,
                                         timeout_s=240)

    metrics = [codec_for(TaskMetrics).decode(v) for v in read_committed(
        config.bootstrap_servers, [config.metrics_topic], 1, timeout_s=30)]
    assert {m.query_id for m in metrics} == {config.query_id}
    assert {m.source_topics for m in metrics} == {(config.input_topic,)}
