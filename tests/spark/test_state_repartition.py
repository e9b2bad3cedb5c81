"""Offline state repartitioning of a real fraud-job checkpoint (real broker, real Spark): a
first run started with the target set before it, then 4 → 8 → 2 state partitions, and the
restarted query continues every account's count with no reset and no gap; a checkpoint whose
last batch did not commit, a running query and an out-of-range target are refused with typed
errors and leave the checkpoint unchanged."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from streaming_jobs.config import JobConfig
from streaming_jobs.runtime.checkpoint.state_repartition import (
    LastBatchNotCommitted,
    QueryStillRunning,
    TargetOutOfBounds,
    align,
    read_batches,
    read_state_partitions,
    repartition_state,
)
from tests.spark.fraud_io import (
    fraud_config,
    produce_txns,
    run_available_now,
    stateful_session,
    txn,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]

ACCOUNTS = 6
PER_PHASE = 6


def phase(number: int) -> list:
    seqs = range(number * PER_PHASE, (number + 1) * PER_PHASE)
    return [txn(account, seq) for seq in seqs for account in range(ACCOUNTS)]


@pytest.fixture
def config(bootstrap_servers: str, new_topic: Callable[..., str], tmp_path: Path) -> JobConfig:
    return fraud_config(
        bootstrap_servers=bootstrap_servers,
        query_id=f"fraud-{uuid.uuid4().hex[:8]}", input_topic=new_topic(partitions=2),
        output_topic=new_topic(), dlq_topic=new_topic(),
        checkpoint_dir=str(tmp_path / "checkpoint"), input_parallelism=2,
        max_offsets_per_trigger=1000, enrichment_cost_ms=0.0, watermark_s=30, task_slots=4,
        metrics_port=0)


def state_partitions_used(query: object) -> set[int]:
    return {op.numShufflePartitions for p in query.recentProgress  # type: ignore[attr-defined]
            for op in p.stateOperators if p.numInputRows}


def test_the_first_run_starts_at_its_target_and_up_and_down_keeps_every_account_count(
        spark: object, config: JobConfig, tmp_path: Path) -> None:
    cp = config.storage.checkpoint_dir
    output = []
    with stateful_session(spark, partitions=2):
        # a target set before anything is planned: the first run starts with it, not 2
        assert align(spark, cp, 4, last_admitted=None, seen_commit=None,
                     max_partitions=16) is None
        produce_txns(config, phase(0))
        scored, query = run_available_now(spark, config)
        output += scored
        assert read_state_partitions(cp) == 4 and state_partitions_used(query) == {4}

        up = repartition_state(spark, cp, 8)
        assert (up.old_partitions, up.new_partitions, up.changed) == (4, 8, True)
        assert up.repartition_batch_id == read_batches(cp).last_committed
        assert read_state_partitions(cp) == 8
        produce_txns(config, phase(1))
        scored, query = run_available_now(spark, config)
        output += scored
        assert state_partitions_used(query) == {8}

        down = repartition_state(spark, cp, 2)
        assert (down.old_partitions, down.new_partitions) == (8, 2)
        again = repartition_state(spark, cp, 2)  # the same request twice: harmless
        assert (again.changed, again.repartition_batch_id) == (False, None)
        produce_txns(config, phase(2))
        scored, query = run_available_now(spark, config)
        output += scored
        assert state_partitions_used(query) == {2}

    per_account: dict[str, list[tuple[int, int]]] = {}
    for r in output:
        per_account.setdefault(r.account_id, []).append((r.account_seq, r.account_txn_count))
    total = 3 * PER_PHASE
    assert len(per_account) == ACCOUNTS
    for account, pairs in per_account.items():
        # every transaction once; the count continues across both repartitions: 1, 2, …, 18
        assert sorted(pairs) == [(s, s + 1) for s in range(total)], account


def test_refuses_when_the_last_batch_did_not_commit_or_the_query_runs(
        spark: object, config: JobConfig, tmp_path: Path) -> None:
    cp = config.storage.checkpoint_dir
    with stateful_session(spark, partitions=4):
        produce_txns(config, phase(0))
        run_available_now(spark, config)
        batches = read_batches(cp)
        assert batches.last_planned == batches.last_committed is not None

        # A batch planned (in the offset log) but not committed: drop the last commit entry.
        copy = tmp_path / "uncommitted"
        shutil.copytree(cp, copy)
        last = batches.last_committed
        (copy / "commits" / str(last)).unlink()
        (copy / "commits" / f".{last}.crc").unlink(missing_ok=True)
        before = sorted(p.name for p in (copy / "offsets").iterdir())
        with pytest.raises(LastBatchNotCommitted, match=f"last batch {last} did not commit"):
            repartition_state(spark, str(copy), 8)
        assert sorted(p.name for p in (copy / "offsets").iterdir()) == before
        assert read_state_partitions(str(copy)) == 4

        for bad in (0, 65):
            with pytest.raises(TargetOutOfBounds, match=f"{bad} state partitions"):
                repartition_state(spark, cp, bad, max_partitions=64)

        running = _start_processing_time(spark, config)
        try:
            with pytest.raises(QueryStillRunning, match=config.identity.query_id):
                repartition_state(spark, cp, 8)
        finally:
            running.stop()
        assert read_state_partitions(cp) == 4


def _start_processing_time(spark: object, config: JobConfig) -> object:
    from streaming_jobs.runtime.kafka import DeadLetterFactory
    from streaming_jobs.runtime.query.plan import Plan
    from tests.spark.fraud_io import fraud_job

    plan = Plan(fraud_job)
    df = plan.build(spark, config.run, config.initial_state(),  # type: ignore[arg-type]
                    DeadLetterFactory(config.bootstrap_servers, config.topics.dlq_topic))
    return (df.writeStream.queryName(config.identity.query_id).outputMode(plan.output_mode)
            .foreachBatch(lambda batch_df, batch_id: None)
            .option("checkpointLocation", config.storage.checkpoint_dir)
            .trigger(processingTime="10 seconds").start())
