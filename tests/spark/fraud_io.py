"""Test-side helpers for the fraud-detection job: transactions, a steady card load the test
can move to another topic (`card_load`), and one availableNow run of the
job's plan on a checkpoint, its output decoded through the job's own output format, and
`fraud_config`, a JobConfig bound to the fraud job."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from schemas.codec import codec_for
from schemas.records import CardTransaction, ScoredTransaction
from streamctl.cards import CardEvents
from streaming_jobs.config import JobConfig
from streaming_jobs.jobs.fraud.job import job as fraud_job
from streaming_jobs.runtime.kafka import DeadLetterFactory
from streaming_jobs.runtime.query.plan import Plan
from streaming_jobs.runtime.query.session import STATE_STORE_SETTINGS
from tests.spark.bound import bound_config
from tests.support.kafka import SteadyLoad, produce_records

T0_MS = 1_700_000_000_000
_PARTITIONS = "spark.sql.shuffle.partitions"


def txn(account: int, seq: int, *, amount: float = 20.0, country: str = "DE",
        gap_ms: int = 600_000) -> CardTransaction:
    """The account's transaction `seq`, `gap_ms` of event time after its previous one."""
    return CardTransaction(
        txn_id=f"acct-{account}-{seq}", account_id=f"acct-{account}", card_id=f"card-{account}",
        account_seq=seq, amount=amount + seq % 3, merchant=f"m-{seq % 7}", country=country,
        event_time_ms=T0_MS + seq * gap_ms + account, channel="online")


def produce_txns(config: JobConfig, txns: Iterable[CardTransaction]) -> None:
    produce_records(config.bootstrap_servers, config.topics.input_topic,
                    ((t.account_id, t) for t in txns))


@contextmanager
def stateful_session(spark: Any, partitions: int) -> Iterator[None]:
    """New queries get a job's state store settings (RocksDB, which repartitioning needs) and
    `partitions` partitions."""
    settings = {**STATE_STORE_SETTINGS, _PARTITIONS: str(partitions)}
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def fraud_config(**fields: Any) -> JobConfig:
    """A JobConfig of the fraud job; its settings (`enrichment_cost_ms`, `watermark_s`) are
    keyword arguments too."""
    return bound_config(fraud_job, **fields)


def run_available_now(spark: Any, config: JobConfig, timeout_s: float = 240.0,
                      on_batch: Callable[[int], None] | None = None) -> tuple[
                          list[ScoredTransaction], Any]:
    """Process everything in the input topic from the checkpoint; output and the last query."""
    plan = Plan(fraud_job)
    codec = codec_for(ScoredTransaction)
    output: list[ScoredTransaction] = []

    def sink(batch_df: Any, batch_id: int) -> None:
        rows = fraud_job.output.encode(batch_df).collect()
        output.extend(codec.decode(r.value) for r in rows)
        if on_batch is not None:
            on_batch(batch_id)

    df = plan.build(spark, config.run, config.initial_state(),
                 DeadLetterFactory(config.bootstrap_servers, config.topics.dlq_topic))
    query = (df.writeStream.queryName(config.identity.query_id).outputMode(plan.output_mode)
             .foreachBatch(sink).option("checkpointLocation", config.storage.checkpoint_dir)
             .trigger(availableNow=True).start())
    finished = query.awaitTermination(timeout_s)
    if not finished:
        query.stop()
    assert finished, f"availableNow run did not finish within {timeout_s} s"
    assert query.exception() is None, query.exception()
    return output, query


def card_load(bootstrap: str, topic: str, accounts: int = 20) -> SteadyLoad:
    """Card transactions (`streamctl.cards`: per-account sequence numbers, 30 % low
    priority), 50 every second until stopped; `load.move_to` moves them to another topic."""
    events, rng = CardEvents(accounts), random.Random(0)

    def make(_seq: int) -> tuple[str, CardTransaction]:
        txn = events.make(rng, int(time.time() * 1000))
        return txn.account_id, txn

    return SteadyLoad(bootstrap, topic, make, per_tick=5, every_s=0.1)
