"""The fraud-detection job through the elastic runtime (registry → plan → transactional sink)
on a real broker and real Spark. A read_committed consumer sees every acknowledged
transaction scored exactly once with its account's running count, the rules fire where the
input asks for them, and undecodable input goes to the dead-letter topic, counted."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from schemas.records import CardTransaction, ScoredTransaction, TaskMetrics
from streamctl.cards import CardLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.profiles import RateProfile
from streaming_jobs.config import JobConfig
from streaming_jobs.jobs.fraud.rules import AMOUNT_OUTLIER, COUNTRY_CHANGE, VELOCITY, FraudRules
from tests.accounting import assert_every_transaction_scored_once
from tests.spark.conftest import SPARK_TASK_SLOTS
from tests.spark.control_io import counter
from tests.spark.fraud_io import fraud_config, fraud_job, produce_txns, stateful_session, txn
from tests.spark.in_process import in_process
from tests.support.kafka import (
    NewTopics,
    decoded,
    job_topics,
    produce,
    read_committed,
    read_committed_once_there,
)
from tests.support.waiting import until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming_jobs.runtime.job import ElasticJob

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(420)]

ACCOUNTS = 4
PER_ACCOUNT = 12
RULES = FraudRules()
GARBAGE = (b"garbage", b"\xc3\x01not-avro")


def workload() -> list[CardTransaction]:
    """Quiet accounts, except: acct-0 pays in a burst (velocity), acct-1 jumps country
    (country change), acct-2's last payment is huge (amount outlier). The load generator's
    accounts (acct-00000 …) never collide with these."""
    txns = []
    for account in range(ACCOUNTS):
        for seq in range(PER_ACCOUNT):
            if account == 0:
                txns.append(txn(0, seq, gap_ms=1000))
            elif account == 1:
                txns.append(txn(1, seq, country="FR" if seq == 6 else "DE"))
            elif account == 2 and seq == PER_ACCOUNT - 1:
                txns.append(txn(2, seq, amount=5000.0))
            else:
                txns.append(txn(account, seq))
    return txns


@pytest.fixture
def config(bootstrap_servers: str, new_topics: NewTopics, tmp_path: Path) -> JobConfig:
    return fraud_config(
        bootstrap_servers=bootstrap_servers,
        query_id=f"fraud-{uuid.uuid4().hex[:8]}", instance_id="test-instance",
        **job_topics(new_topics, output_partitions=2),
        checkpoint_dir=str(tmp_path / "checkpoint"),
        input_parallelism=2, max_offsets_per_trigger=300, trigger_interval_s=0.5,
        enrichment_cost_ms=1.0, watermark_s=30, task_slots=SPARK_TASK_SLOTS, metrics_port=0,
        control_key=b"fraud-runtime-test-control-key")


@pytest.fixture
def running_job(spark: SparkSession, config: JobConfig) -> Iterator[ElasticJob]:
    with (stateful_session(spark, partitions=3),
          in_process(spark, fraud_job, config, control_ready=False) as job):
        yield job


def test_every_transaction_is_scored_once_through_the_sink_with_its_rules(
        running_job: object, config: JobConfig) -> None:
    ledger = CardLedger()
    produce(config.bootstrap_servers, config.topics.input_topic, [(b"x", GARBAGE[0]),
                                                           (b"y", GARBAGE[1])])
    rules_input = workload()
    produce_txns(config, rules_input)  # acknowledged on return
    for t in rules_input:
        ledger.record(t)
    spec = LoadSpec(config.bootstrap_servers, config.topics.input_topic,
                    RateProfile("constant", 300.0), duration_s=4.0, event_type="card",
                    accounts=15, hot_key_share=0.3)
    loaded = run_load(spec, CardLedger())
    assert isinstance(loaded, CardLedger) and loaded.failed == 0 and loaded.acked > 600
    for account, count in loaded.counts.items():
        ledger.counts[account] += count
    ledger.acked += loaded.acked

    assert_every_transaction_scored_once(config.bootstrap_servers, config.topics.output_topic,
                                         ledger,
                                         timeout_s=240)
    scored = decoded(read_committed(config.bootstrap_servers, config.topics.output_topic),
                     ScoredTransaction)
    _assert_rules_fired_where_asked(
        {r.txn_id: r for r in scored if r.txn_id in {t.txn_id for t in rules_input}})
    assert {r.scorer_version for r in scored} == {"v1"}

    letters = read_committed_once_there(config.bootstrap_servers, config.topics.dlq_topic, 2, 30)
    assert sorted(m.value() for m in letters) == sorted(GARBAGE)
    sources = {dict(m.headers())["source_topic"] for m in letters}
    assert sources == {config.topics.input_topic.encode()}
    dead_letters = "streamctl_job_dead_letter_records_total"
    until(lambda: counter(running_job, dead_letters) >= 2, 30, "both dead letters counted")
    assert counter(running_job, dead_letters) == 2
    metrics = decoded(read_committed_once_there(config.bootstrap_servers,
                                                config.topics.metrics_topic,
                                                1, 30), TaskMetrics)
    assert {m.query_id for m in metrics} == {config.identity.query_id}
    assert {m.source_topics for m in metrics} == {(config.topics.input_topic,)}


def _assert_rules_fired_where_asked(by_id: dict[str, ScoredTransaction]) -> None:
    assert len(by_id) == ACCOUNTS * PER_ACCOUNT
    fired = {tid: set(r.rules_fired) for tid, r in by_id.items() if r.rules_fired}
    burst = {f"acct-0-{s}" for s in range(RULES.velocity_max_txns, PER_ACCOUNT)}
    assert fired == ({tid: {VELOCITY} for tid in burst}
                     | {"acct-1-6": {COUNTRY_CHANGE}, "acct-1-7": {COUNTRY_CHANGE},
                        f"acct-2-{PER_ACCOUNT - 1}": {AMOUNT_OUTLIER}})
    assert all(0.0 <= r.score <= 1.0 for r in by_id.values())
    assert by_id[f"acct-2-{PER_ACCOUNT - 1}"].score > by_id["acct-3-5"].score
