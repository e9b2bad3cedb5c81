"""The fraud job without Spark: the runtime's decode step on its input (dead letters, and
shedding of only its low-priority transactions), the per-account operator over a GroupState
double (counts continue across calls, the timeout follows the newest event, a timed-out account
is forgotten), the Avro encoder, and what its declaration tells the runtime."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from schemas.codec import codec_for
from schemas.records import CardTransaction, ScoredTransaction
from streaming_jobs.api import Avro, JobDefinitionError, SwappableFunction
from streaming_jobs.config import JobConfig
from streaming_jobs.jobs.fraud.job import DEFAULT_RULES, AccountScorer, job
from streaming_jobs.jobs.fraud.scoring import SCORERS, RemoteScorer
from streaming_jobs.loading import installed, load
from tests.unit.streaming_jobs.jobs.arrow_input import MemoryDeadLetters, decode

T0 = 1_700_000_000_000
KEY = {"STREAMCTL_CONTROL_KEY": "0123456789abcdef0123"}


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


def test_decode_flags_dead_letters_marks_low_priority_and_sheds_only_those() -> None:
    codec = codec_for(CardTransaction)
    payloads = [codec.encode(card(0)), b"junk", *(codec.encode(card(s, priority=0))
                                                  for s in range(1, 4))]
    dead = MemoryDeadLetters()
    rows = decode(job, payloads, shed=0.5, dead=dead)
    assert [r["dead_letter"] for r in rows] == [False, True, False, False, False]
    assert rows[0]["shed"] is False and rows[0]["txn_id"] == "t0"
    assert [(p, e.offset, e.topic) for p, e in dead.sent] == [(b"junk", 41, "in")]
    assert dead.flushed
    everything = decode(job, payloads, shed=0.999999)
    assert [r["shed"] for r in everything] == [False, False, True, True, True]
    # Marked whether shed or not (the controller sizes shedding by their share).
    none_shed = decode(job, payloads, shed=0.0)
    assert [r["low_priority"] for r in none_shed] == [False, False, True, True, True]
    assert not any(r["shed"] for r in none_shed)


def frame(seqs: range, **kwargs: Any) -> pd.DataFrame:
    return pd.DataFrame([card(s, **kwargs).to_avro() for s in seqs])


def test_the_operator_continues_an_accounts_count_across_calls() -> None:
    slept: list[float] = []
    score = AccountScorer(DEFAULT_RULES, RemoteScorer(SwappableFunction(SCORERS, "v2"), 2.0,
                                                       sleep=slept.append))
    state = State(watermark_ms=T0 - 10_000)
    first = pd.concat(score(("acct-1",), iter([frame(range(3, 6)), frame(range(0, 3))]), state))
    assert first["account_seq"].tolist() == [0, 1, 2, 3, 4, 5]  # event-time order
    assert first["account_txn_count"].tolist() == [1, 2, 3, 4, 5, 6]
    assert set(first["scorer_version"]) == {"v2"} and slept == [pytest.approx(0.012)]
    assert state.timeout_ms == T0 + 5000 + int(DEFAULT_RULES.state_ttl_s * 1000)
    second = pd.concat(score(("acct-1",), iter([frame(range(6, 8))]), state))
    assert second["account_txn_count"].tolist() == [7, 8]


def test_a_timed_out_account_is_forgotten() -> None:
    score = AccountScorer(DEFAULT_RULES, RemoteScorer(SwappableFunction(SCORERS, "v1"), 0.0))
    state = State(row=(3, 10.0, 0.0, "DE", T0, str(T0), T0), timed_out=True)
    assert list(score(("acct-1",), iter([]), state)) == []
    assert not state.exists


def test_encoded_output_is_keyed_by_account_and_decodes() -> None:
    record = ScoredTransaction("acct-1", "t1", 4, T0, 12.5, 5, 0.9, ("velocity",), True, "v1")
    rows = pa.RecordBatch.from_pylist([{**record.to_avro(), "rules_fired": ["velocity"]}])
    assert isinstance(job.output, Avro)
    [out] = list(job.output.arrow_encoder()(iter([rows])))
    assert out.column("key").to_pylist() == [b"acct-1"]
    assert codec_for(ScoredTransaction).decode(out.column("value")[0].as_py()) == record


def test_the_bundled_jobs_are_installed_plugins_with_their_defaults() -> None:
    assert {"sensor-averages", "fraud-detection"} <= set(installed())
    assert installed()["fraud-detection"].target == "streaming_jobs.jobs.fraud.job:job"
    fraud = load("fraud-detection")
    assert fraud is job
    assert isinstance(fraud.input, Avro) and fraud.input.name == CardTransaction.AVRO_NAME
    assert isinstance(fraud.output, Avro) and fraud.output.name == ScoredTransaction.AVRO_NAME
    assert fraud.stateful and fraud.output_mode == "append"
    assert tuple(fraud.functions) == ("v1", "v2")


def test_each_job_names_the_knob_its_capacity_grows_with() -> None:
    """The sensor job's lookup runs in the source tasks, the fraud job's scoring call in its
    stateful operator: the controller sizes what the job names (README, the second job)."""
    assert load("sensor-averages").scales_with == "input_parallelism"
    assert job.scales_with == "state_partitions"
    with pytest.raises(JobDefinitionError, match="job 'fraud-detection': scales_with names an "
                                                 "unknown knob 'executors'"):
        replace(job, scales_with="executors")
    with pytest.raises(JobDefinitionError, match="scales_with='state_partitions' needs "
                                                 "stateful=True"):
        replace(job, stateful=False)


def test_choosing_the_job_sets_its_topics_unless_given(tmp_path: Path) -> None:
    env = {**KEY, "STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", "STREAMCTL_STATE_DIR": str(tmp_path)}
    config = JobConfig.from_sources(job, {"output_topic": "alerts"}, env)
    assert (config.identity.query_id, config.topics.input_topic, config.topics.output_topic,
            config.topics.dlq_topic) == (
        "fraud-detection", "card-transactions", "alerts", "card-transactions.dlq")
    assert config.storage.checkpoint_dir == str(tmp_path / "checkpoints" / "fraud-detection"
                                        / "fraud-detection")
    sensor = JobConfig.from_sources(load("sensor-averages"), {}, env)
    assert (sensor.identity.job, sensor.topics.input_topic) == ("sensor-averages",
                                                               "sensor-readings")
