"""Test-side helpers for the fraud-detection job: transactions, and one availableNow run of
the registered plan on a checkpoint, its output decoded through the plan's own encoder."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from schemas.codec import codec_for
from schemas.records import CardTransaction, ScoredTransaction
from streaming_jobs.config import JobConfig
from streaming_jobs.plans import plan_for
from streaming_jobs.runtime.kafka import DeadLetterFactory
from streaming_jobs.runtime.state_repartition import ROCKSDB_PROVIDER
from tests.spark.kafka_io import produce_records

T0_MS = 1_700_000_000_000
_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_PARTITIONS = "spark.sql.shuffle.partitions"


def txn(account: int, seq: int, *, amount: float = 20.0, country: str = "DE",
        gap_ms: int = 600_000) -> CardTransaction:
    """The account's transaction `seq`, `gap_ms` of event time after its previous one."""
    return CardTransaction(
        txn_id=f"acct-{account}-{seq}", account_id=f"acct-{account}", card_id=f"card-{account}",
        account_seq=seq, amount=amount + seq % 3, merchant=f"m-{seq % 7}", country=country,
        event_time_ms=T0_MS + seq * gap_ms + account, channel="online")


def produce_txns(config: JobConfig, txns: Iterable[CardTransaction]) -> None:
    produce_records(config.bootstrap_servers, config.input_topic,
                    ((t.account_id, t) for t in txns))


@contextmanager
def stateful_session(spark: Any, partitions: int) -> Iterator[None]:
    """New queries get the RocksDB store (needed to repartition) and `partitions` partitions."""
    saved = {key: spark.conf.get(key, None) for key in (_PROVIDER, _PARTITIONS)}
    spark.conf.set(_PROVIDER, ROCKSDB_PROVIDER)
    spark.conf.set(_PARTITIONS, str(partitions))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def run_available_now(spark: Any, config: JobConfig, timeout_s: float = 240.0,
                      on_batch: Callable[[int], None] | None = None) -> tuple[
                          list[ScoredTransaction], Any]:
    """Process everything in the input topic from the checkpoint; output and the last query."""
    plan = plan_for("fraud-detection")
    codec = codec_for(ScoredTransaction)
    output: list[ScoredTransaction] = []

    def sink(batch_df: Any, batch_id: int) -> None:
        rows = batch_df.mapInArrow(plan.encode, plan.encoded_schema).collect()
        output.extend(codec.decode(r.value) for r in rows)
        if on_batch is not None:
            on_batch(batch_id)

    df = plan.build(spark, config, DeadLetterFactory(config.bootstrap_servers, config.dlq_topic))
    query = (df.writeStream.queryName(config.query_id).outputMode(plan.output_mode)
             .foreachBatch(sink).option("checkpointLocation", config.checkpoint_dir)
             .trigger(availableNow=True).start())
    finished = query.awaitTermination(timeout_s)
    if not finished:
        query.stop()
    assert finished, f"availableNow run did not finish within {timeout_s} s"
    assert query.exception() is None, query.exception()
    return output, query
