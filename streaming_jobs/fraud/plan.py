"""The fraud-detection job's Spark plan: card transactions → per-account state → scores.

Kafka source → decode on Arrow batches (undecodable records go to the same dead-letter sink
and observed `dead_letters` metric as the sensor job) → event-time watermark → grouped by
account, `applyInPandasWithState` folds each transaction into the account's state with the
pure rules (`fraud.rules`) and sends it to the scoring call (`fraud.scoring`) → one
`ScoredTransaction` per input transaction, appended.

Why `applyInPandasWithState` and not `transformWithStateInPandas`: Spark's offline state
repartitioning (`StreamingCheckpointManager.repartition`) supports both (its operator list has
`applyInPandasWithState` and `transformWithStateInPandasExec`), but the latter needs protobuf
(not a dependency of this project), the RocksDB state store set session-wide (the sensor job
shares the warm driver) and a round trip to the JVM for every state access.

Bounded state: the state of an account is one small row (count, running mean and M2, last
country and time, and the event times within the velocity window — at most the transactions
of one window). Each update sets an event-time timeout `state_ttl_s` after the account's
newest transaction; when the watermark (newest event time − `watermark_s`) passes it, Spark
calls the function with `hasTimedOut` and the state is removed. Transactions older than the
watermark are dropped by Spark before the operator and counted in the query's
`numRowsDroppedByWatermark` (reported in the job's metrics, never silent). An account that
comes back after its state expired starts again from a count of 1.

Within a batch, an account's transactions are processed in (event time, account_seq) order,
so a replayed batch produces the same scores from the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from schemas.codec import DecodeError, codec_for
from schemas.records import CardTransaction, ScoredTransaction
from streaming_jobs.fraud.rules import (
    AccountState,
    FraudRules,
    Txn,
    combined_score,
    expiry_ms,
    step,
)
from streaming_jobs.fraud.scoring import Features, RemoteScorer, scorer_for
from streaming_jobs.sensor_averages import OBSERVATION, DeadLetterSink, ShedRule
from streaming_jobs.source import KafkaInput, read_kafka

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.state import GroupState

    from streaming_jobs.config import JobConfig

_TXN_FIELDS = ("txn_id", "account_id", "card_id", "account_seq", "amount", "merchant",
               "country", "event_time_ms", "channel", "priority")
DECODED_SCHEMA = (
    "txn_id string, account_id string, card_id string, account_seq long, amount double, "
    "merchant string, country string, event_time_ms long, channel string, priority int, "
    "dead_letter boolean, shed boolean")
SCORED_SCHEMA = (
    "account_id string, txn_id string, account_seq long, event_time_ms long, amount double, "
    "account_txn_count long, score double, rules_fired array<string>, alert boolean, "
    "scorer_version string")
STATE_SCHEMA = (
    "txn_count long, amount_mean double, amount_m2 double, last_country string, "
    "last_event_ms long, recent_ms string, max_event_ms long")
"""`recent_ms` is comma-separated: PySpark 4.3 cannot read an array in this state schema (its
worker fails parsing the array type's JSON: KeyError 'elementType')."""
DEFAULT_RULES = FraudRules()
NO_SHEDDING = ShedRule()
_SCORED_COLUMNS = tuple(part.split()[0] for part in SCORED_SCHEMA.split(", "))


def _decoded_arrow_schema() -> pa.Schema:
    return pa.schema([("txn_id", pa.string()), ("account_id", pa.string()),
                      ("card_id", pa.string()), ("account_seq", pa.int64()),
                      ("amount", pa.float64()), ("merchant", pa.string()),
                      ("country", pa.string()), ("event_time_ms", pa.int64()),
                      ("channel", pa.string()), ("priority", pa.int32()),
                      ("dead_letter", pa.bool_()), ("shed", pa.bool_())])


def decode_transactions(batches: Iterator[pa.RecordBatch], dead_letters: DeadLetterSink,
                        shed: ShedRule = NO_SHEDDING) -> Iterator[pa.RecordBatch]:
    """Kafka rows (value, topic, partition, offset) → transactions, one row per input.

    Undecodable rows go to `dead_letters` and come out flagged `dead_letter` with nulls;
    low-priority transactions (`priority` 0) that `shed` drops come out flagged `shed`. The
    plan counts both (observed metrics) before dropping them; neither is scored.
    """
    codec = codec_for(CardTransaction)
    for batch in batches:
        cols = batch.to_pydict()
        out: dict[str, list[object]] = {name: [] for name in (*_TXN_FIELDS, "dead_letter",
                                                              "shed")}
        for payload, topic, partition, offset in zip(
                cols["value"], cols["topic"], cols["partition"], cols["offset"], strict=True):
            try:
                txn = codec.decode(payload, topic=topic, partition=partition, offset=offset)
            except DecodeError as err:
                dead_letters.send(payload, err)
                row = (*(None for _ in _TXN_FIELDS), True, False)
            else:
                dropped = txn.priority == 0 and shed.sheds(txn.account_id, topic, partition,
                                                           offset)
                row = (*(getattr(txn, name) for name in _TXN_FIELDS), False, dropped)
            for column, value in zip(out, row, strict=True):
                out[column].append(value)
        yield pa.RecordBatch.from_pydict(out, schema=_decoded_arrow_schema())
    dead_letters.flush()


def state_from_row(row: tuple[Any, ...]) -> AccountState:
    count, mean, m2, country, last_ms, recent, max_ms = row
    return AccountState(int(count), float(mean), float(m2), str(country), int(last_ms),
                        tuple(int(t) for t in str(recent).split(",") if t), int(max_ms))


def state_to_row(s: AccountState) -> tuple[Any, ...]:
    return (s.txn_count, s.amount_mean, s.amount_m2, s.last_country, s.last_event_ms,
            ",".join(map(str, s.recent_ms)), s.max_event_ms)


@dataclass(frozen=True)
class AccountScorer:
    """The function `applyInPandasWithState` calls per account and batch (picklable)."""

    rules: FraudRules
    scorer: RemoteScorer

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        import pandas as pd

        if state.hasTimedOut:  # idle past the TTL: forget the account
            state.remove()
            return
        nonempty = [f for f in frames if len(f)]
        if not nonempty:
            return
        txns = pd.concat(nonempty, ignore_index=True).sort_values(
            ["event_time_ms", "account_seq"], kind="stable")
        current = state_from_row(state.get) if state.exists else AccountState()
        rows, features = [], []
        for t in txns.itertuples(index=False):
            current, verdict = step(current, Txn(int(t.event_time_ms), float(t.amount),
                                                 str(t.country)), self.rules)
            rows.append((t, verdict))
            features.append(Features(str(t.txn_id), float(t.amount), verdict.amount_z,
                                     verdict.txns_in_window, verdict.account_txn_count,
                                     str(t.channel)))
        scores = self.scorer(features)
        state.update(state_to_row(current))
        state.setTimeoutTimestamp(expiry_ms(current, state.getCurrentWatermarkMs(), self.rules))
        yield pd.DataFrame(
            [self._scored(t, v, s) for (t, v), s in zip(rows, scores, strict=True)],
            columns=list(_SCORED_COLUMNS))

    def _scored(self, t: Any, verdict: Any, model_score: float) -> tuple[Any, ...]:
        score = combined_score(model_score, verdict.rules_fired, self.rules)
        return (t.account_id, t.txn_id, int(t.account_seq), int(t.event_time_ms),
                float(t.amount), verdict.account_txn_count, score, list(verdict.rules_fired),
                score >= self.rules.alert_threshold, self.scorer.version)


def encode_scored(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Scored rows → Kafka (key = account_id, value = Avro ScoredTransaction)."""
    codec = codec_for(ScoredTransaction)
    for batch in batches:
        keys, values = [], []
        for row in batch.to_pylist():
            row["rules_fired"] = tuple(row["rules_fired"])
            keys.append(row["account_id"].encode())
            values.append(codec.encode(ScoredTransaction(**row)))
        yield pa.RecordBatch.from_pydict(
            {"key": keys, "value": values},
            schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]))


def build_fraud_detection(
    spark: SparkSession,
    config: JobConfig,
    dead_letter_factory: Callable[[], DeadLetterSink],
    rules: FraudRules = DEFAULT_RULES,
    source: KafkaInput | None = None,
) -> DataFrame:
    """The streaming plan up to the scored rows (columns of ScoredTransaction).

    From `config`: the source (topic, `input_parallelism` as minPartitions, batch cap; the
    runtime's `source` names it), the watermark (`watermark_s`), the scoring call's version
    (`udf_version`) and cost per record (`enrichment_cost_ms`), and the share of low-priority
    transactions shed (`shed_fraction`).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    shed = ShedRule(config.shed_fraction)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return decode_transactions(batches, dead_letter_factory(), shed)

    raw = read_kafka(spark, config, source)
    transactions = (raw.select("value", "topic", "partition", "offset")
                    .mapInArrow(decode, DECODED_SCHEMA)
                    .observe(OBSERVATION,
                             F.sum(F.col("dead_letter").cast("long")).alias("dead_letters"),
                             F.sum(F.col("shed").cast("long")).alias("rows_shed"))
                    .where(~F.col("dead_letter") & ~F.col("shed"))
                    .drop("dead_letter", "shed")
                    .withColumn("event_time", F.timestamp_millis("event_time_ms")))
    scorer_for(config.udf_version)  # an unknown version fails here, not in a Spark task
    score = AccountScorer(rules, RemoteScorer(config.udf_version, config.enrichment_cost_ms))
    return (transactions.withWatermark("event_time", f"{config.watermark_s} seconds")
            .groupBy("account_id")
            .applyInPandasWithState(score, SCORED_SCHEMA, STATE_SCHEMA, "append",
                                    GroupStateTimeout.EventTimeTimeout))
