"""The fraud job's plan functions without Spark: decoding with dead letters and counted
shedding of low-priority transactions, the per-account operator over a GroupState double
(counts continue across calls, the timeout follows the newest event, a timed-out account is
forgotten), the Avro encoder, and the registry's per-job defaults."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from schemas.codec import DecodeError, codec_for
from schemas.records import CardTransaction, ScoredTransaction
from streaming_jobs.config import ConfigError, JobConfig
from streaming_jobs.fraud.plan import (
    DEFAULT_RULES,
    AccountScorer,
    decode_transactions,
    encode_scored,
)
from streaming_jobs.fraud.scoring import RemoteScorer
from streaming_jobs.plans import PLANS, plan_for
from streaming_jobs.sensor_averages import ShedRule

T0 = 1_700_000_000_000
KEY = {"STREAMCTL_CONTROL_KEY": "0123456789abcdef0123"}


class DeadLetters:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, DecodeError]] = []
        self.flushed = False

    def send(self, payload: bytes | None, error: DecodeError) -> None:
        self.sent.append((payload, error))

    def flush(self) -> None:
        self.flushed = True


class State:
    """The part of Spark's GroupState the operator uses."""

    def __init__(self, row: tuple[Any, ...] | None = None, watermark_ms: int = 0,
                 timed_out: bool = False) -> None:
        self.row, self.watermark_ms, self.hasTimedOut = row, watermark_ms, timed_out
        self.timeout_ms: int | None = None

    @property
    def exists(self) -> bool:
        return self.row is not None

    @property
    def get(self) -> tuple[Any, ...]:
        assert self.row is not None
        return self.row

    def update(self, row: tuple[Any, ...]) -> None:
        self.row = row

    def remove(self) -> None:
        self.row = None

    def setTimeoutTimestamp(self, ms: int) -> None:
        self.timeout_ms = ms

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark_ms


def card(seq: int, priority: int = 1, amount: float = 10.0) -> CardTransaction:
    return CardTransaction(f"t{seq}", "acct-1", "card-1", seq, amount, "m", "DE",
                           T0 + seq * 1000, "online", priority)


def kafka_batch(payloads: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": payloads, "topic": ["in"] * len(payloads),
                                       "partition": [0] * len(payloads),
                                       "offset": list(range(len(payloads)))})


def test_decode_flags_dead_letters_and_sheds_only_low_priority() -> None:
    codec = codec_for(CardTransaction)
    payloads = [codec.encode(card(0)), b"junk", *(codec.encode(card(s, priority=0))
                                                  for s in range(1, 4))]
    dead = DeadLetters()
    [out] = list(decode_transactions(iter([kafka_batch(payloads)]), dead, ShedRule(0.5)))
    rows = out.to_pylist()
    assert [r["dead_letter"] for r in rows] == [False, True, False, False, False]
    assert rows[0]["shed"] is False and rows[0]["txn_id"] == "t0"
    assert [(p, e.offset, e.topic) for p, e in dead.sent] == [(b"junk", 1, "in")]
    assert dead.flushed
    everything = next(decode_transactions(iter([kafka_batch(payloads)]), DeadLetters(),
                                          ShedRule(0.999999)))
    assert everything.column("shed").to_pylist() == [False, False, True, True, True]


def frame(seqs: range, **kwargs: Any) -> pd.DataFrame:
    return pd.DataFrame([card(s, **kwargs).to_avro() for s in seqs])


def test_the_operator_continues_an_accounts_count_across_calls() -> None:
    slept: list[float] = []
    score = AccountScorer(DEFAULT_RULES, RemoteScorer("v2", 2.0, sleep=slept.append))
    state = State(watermark_ms=T0 - 10_000)
    first = pd.concat(score(("acct-1",), iter([frame(range(3, 6)), frame(range(0, 3))]), state))
    assert first["account_seq"].tolist() == [0, 1, 2, 3, 4, 5]  # event-time order
    assert first["account_txn_count"].tolist() == [1, 2, 3, 4, 5, 6]
    assert set(first["scorer_version"]) == {"v2"} and slept == [pytest.approx(0.012)]
    assert state.timeout_ms == T0 + 5000 + int(DEFAULT_RULES.state_ttl_s * 1000)
    second = pd.concat(score(("acct-1",), iter([frame(range(6, 8))]), state))
    assert second["account_txn_count"].tolist() == [7, 8]


def test_a_timed_out_account_is_forgotten() -> None:
    score = AccountScorer(DEFAULT_RULES, RemoteScorer("v1", 0.0))
    state = State(row=(3, 10.0, 0.0, "DE", T0, str(T0), T0), timed_out=True)
    assert list(score(("acct-1",), iter([]), state)) == []
    assert not state.exists


def test_encoded_output_is_keyed_by_account_and_decodes() -> None:
    record = ScoredTransaction("acct-1", "t1", 4, T0, 12.5, 5, 0.9, ("velocity",), True, "v1")
    rows = pa.RecordBatch.from_pylist([{**record.to_avro(), "rules_fired": ["velocity"]}])
    [out] = list(encode_scored(iter([rows])))
    assert out.column("key").to_pylist() == [b"acct-1"]
    assert codec_for(ScoredTransaction).decode(out.column("value")[0].as_py()) == record


def test_the_registry_names_each_job_and_its_defaults() -> None:
    assert set(PLANS) == {"sensor-averages", "fraud-detection"}
    fraud = plan_for("fraud-detection")
    assert (fraud.input_record, fraud.output_record) == (CardTransaction, ScoredTransaction)
    assert fraud.stateful and fraud.output_mode == "append" and fraud.udf_versions == ("v1", "v2")
    with pytest.raises(ValueError, match="unknown job 'fraud'; known jobs: fraud-detection"):
        plan_for("fraud")


def test_each_plan_names_the_knob_its_capacity_grows_with() -> None:
    """The sensor job's lookup runs in the source tasks, the fraud job's scoring call in its
    stateful operator: the controller sizes what the plan names (README, the second job)."""
    assert plan_for("sensor-averages").scaling_parameter == "input_parallelism"
    assert plan_for("fraud-detection").scaling_parameter == "state_partitions"
    sensor = plan_for("sensor-averages")
    with pytest.raises(ValueError, match="scaling_parameter must be one of input_parallelism, "
                                         "state_partitions, got 'executors'"):
        replace(sensor, scaling_parameter="executors")
    with pytest.raises(ValueError, match="a stateless plan cannot scale by its state"):
        replace(sensor, stateful=False, scaling_parameter="state_partitions")


def test_choosing_the_job_sets_its_topics_unless_given() -> None:
    env = {**KEY, "STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", "STREAMCTL_JOB": "fraud-detection"}
    config = JobConfig.from_sources({"output_topic": "alerts"}, env)
    assert (config.query_id, config.input_topic, config.output_topic, config.dlq_topic) == (
        "fraud-detection", "card-transactions", "alerts", "card-transactions.dlq")
    assert config.checkpoint_dir.endswith("checkpoints/fraud-detection")
    sensor = JobConfig.from_sources({}, {**KEY, "STREAMCTL_BOOTSTRAP_SERVERS": "k:9092"})
    assert (sensor.job, sensor.input_topic) == ("sensor-averages", "sensor-readings")
    with pytest.raises(ConfigError, match="job must be one of fraud-detection, "
                                          "sensor-averages, got 'fraud'"):
        JobConfig.from_sources({"job": "fraud"}, {**KEY, "STREAMCTL_BOOTSTRAP_SERVERS": "k"})
