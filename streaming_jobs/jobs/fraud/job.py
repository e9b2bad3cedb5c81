"""The bundled fraud-detection job: card transactions → per-account state → scores.

Written against the public job API only (`streaming_jobs.api`), registered under the
`streamctl.jobs` entry point as `fraud-detection`. Avro `CardTransaction`s (decoded, dead
letters and shedding by the runtime: only priority-0 transactions may be shed) → event-time
watermark → grouped by account, `applyInPandasWithState` folds each transaction into the
account's state with the pure rules (`fraud.rules`) and sends it to the scoring call
(`fraud.scoring`: the job's function versions, so the capacity grows with its state
partitions) → one Avro `ScoredTransaction` per input transaction, appended.

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

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.codec import load_schema
from streaming_jobs.api import STATE_PARTITIONS, Avro, Job, JobContext, Setting, Topics
from streaming_jobs.jobs.fraud.rules import (
    AccountState,
    FraudRules,
    Txn,
    combined_score,
    expiry_ms,
    step,
)
from streaming_jobs.jobs.fraud.scoring import SCORERS, Features, RemoteScorer

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.state import GroupState

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
_SCORED_COLUMNS = tuple(part.split()[0] for part in SCORED_SCHEMA.split(", "))


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


def scorer(context: JobContext) -> RemoteScorer:
    """The scoring call of the version in force, with its cost per record."""
    assert context.function is not None
    return RemoteScorer(context.function, float(context.settings["enrichment_cost_ms"]))


def build(spark: SparkSession, transactions: DataFrame, context: JobContext,
          rules: FraudRules = DEFAULT_RULES) -> DataFrame:
    """Decoded transactions → one scored row per transaction (columns of ScoredTransaction).

    From the context: the watermark (`watermark_s`), the scoring call's version and cost per
    record (`enrichment_cost_ms`).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (transactions.withColumn("event_time", F.timestamp_millis("event_time_ms"))
            .withWatermark("event_time", f"{context.settings['watermark_s']} seconds")
            .groupBy("account_id")
            .applyInPandasWithState(AccountScorer(rules, scorer(context)), SCORED_SCHEMA,
                                    STATE_SCHEMA, "append",
                                    GroupStateTimeout.EventTimeTimeout))


def low_priority(transaction: Mapping[str, Any], _settings: Mapping[str, Any]) -> bool:
    """Only priority-0 transactions may be shed."""
    return transaction["priority"] == 0


job = Job(
    name="fraud-detection",
    description="card transactions → per-account state and rules → scoring call → one "
                "scored transaction per input",
    build=build,
    input=Avro(load_schema("io.streamctl.cards.v1.CardTransaction")),
    output=Avro(load_schema("io.streamctl.cards.v1.ScoredTransaction"), key="account_id"),
    topics=Topics(input="card-transactions", output="scored-transactions",
                  dead_letters="card-transactions.dlq"),
    stateful=True,
    scales_with=STATE_PARTITIONS,
    functions=SCORERS,
    settings=(
        Setting("enrichment_cost_ms", 5.0, "the scoring call's cost per transaction in ms"),
        Setting("watermark_s", 10, "allowed event-time lateness in seconds"),
    ),
    low_priority=low_priority,
)
