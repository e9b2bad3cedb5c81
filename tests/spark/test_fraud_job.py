"""The fraud-detection job on a real broker and real Spark: one scored record per input
transaction with the per-account count, the rules firing where the input asks for them, and
undecodable input sent to the dead-letter topic and counted."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from streaming_jobs.config import JobConfig
from streaming_jobs.jobs.fraud.rules import AMOUNT_OUTLIER, COUNTRY_CHANGE, VELOCITY, FraudRules
from streaming_jobs.runtime.query.input import OBSERVATION
from tests.spark.fraud_io import (
    fraud_config,
    produce_txns,
    run_available_now,
    stateful_session,
    txn,
)
from tests.spark.kafka_io import TopicReader, produce

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(360)]

ACCOUNTS = 4
PER_ACCOUNT = 12
RULES = FraudRules()


def workload() -> list:
    """Quiet accounts, except: acct-0 pays in a burst (velocity), acct-1 jumps country
    (country change), acct-2's last payment is huge (amount outlier)."""
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
def config(bootstrap_servers: str, new_topic: Callable[..., str], tmp_path: Path) -> JobConfig:
    return fraud_config(
        bootstrap_servers=bootstrap_servers,
        query_id=f"fraud-{uuid.uuid4().hex[:8]}", input_topic=new_topic(partitions=2),
        output_topic=new_topic(), dlq_topic=new_topic(),
        checkpoint_dir=str(tmp_path / "checkpoint"), input_parallelism=2,
        max_offsets_per_trigger=30, enrichment_cost_ms=1.0, watermark_s=30, task_slots=4,
        metrics_port=0)


def test_every_transaction_is_scored_once_with_its_account_count(
        spark: object, config: JobConfig) -> None:
    txns = workload()
    produce(config.bootstrap_servers, config.input_topic, [(b"x", b"garbage"),
                                                           (b"y", b"\xc3\x01not-avro")])
    produce_txns(config, txns)
    with stateful_session(spark, partitions=3):
        output, query = run_available_now(spark, config)

    assert sorted(r.txn_id for r in output) == sorted(t.txn_id for t in txns)  # once each
    assert all(r.account_txn_count == r.account_seq + 1 for r in output), "count != seq + 1"
    by_id = {r.txn_id: r for r in output}
    fired = {tid: set(r.rules_fired) for tid, r in by_id.items() if r.rules_fired}
    burst = {f"acct-0-{s}" for s in range(RULES.velocity_max_txns, PER_ACCOUNT)}
    assert fired == ({tid: {VELOCITY} for tid in burst}
                     | {"acct-1-6": {COUNTRY_CHANGE}, "acct-1-7": {COUNTRY_CHANGE},
                        f"acct-2-{PER_ACCOUNT - 1}": {AMOUNT_OUTLIER}})
    assert all(0.0 <= r.score <= 1.0 and r.scorer_version == "v1" for r in output)
    assert by_id[f"acct-2-{PER_ACCOUNT - 1}"].score > by_id["acct-3-5"].score
    dead = sum(int((p.observedMetrics.get(OBSERVATION) or {"dead_letters": 0})
                   ["dead_letters"] or 0) for p in query.recentProgress)
    assert dead == 2
    dlq = TopicReader(config.bootstrap_servers, config.dlq_topic)
    try:
        messages = dlq.until(lambda ms: len(ms) >= 2, timeout_s=30)
    finally:
        dlq.close()
    headers = [dict(m.headers()) for m in messages]
    assert {h["source_topic"] for h in headers} == {config.input_topic.encode()}
    assert {m.value() for m in messages} == {b"garbage", b"\xc3\x01not-avro"}
