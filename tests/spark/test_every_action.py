"""Every control action, in order, on one running stateful job under continuous load.

The fraud-detection job keeps per-account state (`account_txn_count`), so "state continuous
across each change" is checkable per record. While card transactions with per-account
sequence numbers keep arriving, the test sends input parallelism up and down, state
partitions up and down, an output retarget, an input retarget (the producers move to a topic
with more partitions), a throttle, load shedding and a UDF swap, each acked APPLIED with its
pause; the output retarget, the shedding and the UDF swap keep the same Spark run (no
restart). Then a read_committed consumer over both output topics must see every acknowledged
transaction exactly once except those shed (counted by the job's metrics, all low priority),
and each account's count must run 1, 2, 3, … in sequence order across every change. The
state topic holds the last change, and a new `job run` process on the same checkpoint resumes
at it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from schemas.records import Ack, DesiredStateRecord, Outcome, ScoredTransaction, TaskMetrics
from streamctl.processes import Child, start_child
from streaming_jobs.config import JobConfig, changed
from streaming_jobs.runtime.kafka import read_latest
from tests.spark.bound import run_command
from tests.spark.conftest import SPARK_TASK_SLOTS
from tests.spark.control_io import KEY, consumed, counter, metrics_of
from tests.spark.fraud_io import card_load, fraud_config, fraud_job, stateful_session, txn
from tests.spark.in_process import in_process
from tests.support.control import send_and_await
from tests.support.kafka import (
    NewTopics,
    SteadyLoad,
    TopicReader,
    decoded,
    job_topics,
    produce_records,
    read_committed,
    read_committed_once_there,
)
from tests.support.waiting import until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]

ACTIONS = (  # (parameter, value; a name is a topic of the test), applied at epochs 1, 2, …
    ("input_parallelism", "4"), ("input_parallelism", "2"),
    ("state_partitions", "4"), ("state_partitions", "2"),
    ("output_topic", "out2"), ("input_topic", "in2"),
    ("max_offsets_per_trigger", "150"), ("shed_fraction", "0.3"), ("udf_version", "v2"),
)
READ_PER_BATCH = {"output_topic", "shed_fraction", "udf_version"}
"""Swapped at a batch boundary: the same Spark run goes on, its pause is the hold."""


@pytest.fixture
def config(bootstrap_servers: str, new_topics: NewTopics, tmp_path: Path) -> JobConfig:
    return fraud_config(
        bootstrap_servers=bootstrap_servers,
        query_id=f"every-{uuid.uuid4().hex[:8]}", instance_id="test-instance",
        **job_topics(new_topics, output_partitions=2, state=True),
        checkpoint_dir=str(tmp_path / "checkpoint"), input_parallelism=2, state_partitions=2,
        max_offsets_per_trigger=300, trigger_interval_s=0.5, enrichment_cost_ms=1.0,
        watermark_s=60, task_slots=SPARK_TASK_SLOTS, metrics_port=0, control_key=KEY,
        input_drain_quiet_s=1.0, input_drain_timeout_s=60.0)


def test_every_action_in_order_loses_duplicates_and_resets_nothing_then_a_new_process_resumes(
        spark: SparkSession, config: JobConfig, new_topics: NewTopics, tmp_path: Path) -> None:
    topics = new_topics(out2=2, in2=4)
    metrics = TopicReader(config.bootstrap_servers, config.topics.metrics_topic)
    try:
        with (stateful_session(spark, partitions=config.initial.state_partitions),
              in_process(spark, fraud_job, config) as job):
            acked, acks = _apply_each_action_under_load(
                config, metrics, topics, lambda: job.query.run_id)
            seen = metrics.until(lambda ms: consumed(ms) >= len(acked), 180)
    finally:
        metrics.close()
    batches = {m.batch_id: m for m in map(metrics_of, seen) if m.batch_id >= 0}
    _assert_metrics_follow_each_action(batches, config.topics.input_topic, topics["in2"])
    shed = sum(m.rows_shed for m in batches.values())
    assert shed > 0 and sum(m.rows_dropped_by_watermark for m in batches.values()) == 0
    assert counter(job, "streamctl_job_rows_shed_total") == shed
    scored = decoded(read_committed_once_there(
        config.bootstrap_servers, [config.topics.output_topic,
                                   topics["out2"]], len(acked) - shed, 120),
        ScoredTransaction)
    _assert_every_transaction_once_but_the_shed(scored, acked, shed)
    _assert_counts_continue_per_account(scored)
    print("pauses (ms):", {f"{p}={v}": a.pause_ms for (p, v), a in zip(ACTIONS, acks,
                                                                      strict=True)})

    state = read_latest(config.bootstrap_servers, config.topics.state_topic,
                        config.identity.query_id,
                        DesiredStateRecord)
    assert state is not None and (state.epoch, state.control_id) == (len(ACTIONS),
                                                                     acks[-1].control_id)
    _assert_a_new_process_resumes_every_change(config, topics, tmp_path)


def _apply_each_action_under_load(config: JobConfig, metrics: TopicReader,
                                  topics: dict[str, str], run_id: Callable[[], str | None],
                                  ) -> tuple[dict[str, Any], list[Ack]]:
    """Card transactions arrive throughout; each action is applied in turn. The transactions
    the broker acknowledged, and each action's ack."""
    load = card_load(config.bootstrap_servers, config.topics.input_topic)
    try:
        _wait_batches(metrics, epoch=0)
        acks = [_apply(config, metrics, load, epoch, parameter, topics.get(value, value), run_id)
                for epoch, (parameter, value) in enumerate(ACTIONS, start=1)]
        # On an idle machine every change is through in ~20 s (960 transactions at ~50/s):
        # keep the load on until the exactness check has enough to count.
        until(lambda: len(load.acked) > 1000, 60, "1 000 acknowledged transactions")
    finally:
        acked = {t.txn_id: t for t in load.stop()}  # type: ignore[attr-defined]
    assert load.failed == 0 and len(acked) > 1000
    return acked, acks


def _apply(config: JobConfig, metrics: TopicReader, load: SteadyLoad, epoch: int,
           parameter: str, value: str, run_id: Callable[[], str | None]) -> Ack:
    """Send one action, assert its ack (and that a knob read per batch kept the Spark run),
    let a batch with data run under it."""
    run_before = run_id()
    if parameter == "input_topic":
        load.move_to(value)  # the contract of a switch: producers move first
    ack = send_and_await(config.bootstrap_servers, config.identity.query_id, parameter, value,
                         epoch,
                         KEY, control_topic=config.topics.control_topic,
                         ack_topic=config.topics.ack_topic)
    assert ack.outcome is Outcome.APPLIED, f"{parameter}={value}: {ack.detail}"
    assert ack.detail.startswith(f"{parameter} ") and "→" in ack.detail, ack.detail
    if parameter in READ_PER_BATCH:
        assert "without a restart" in ack.detail and ack.pause_ms >= 0, ack.detail
        assert run_id() == run_before, f"{parameter}: the query was restarted"
    else:
        assert ack.pause_ms > 0 and run_id() != run_before, ack.detail
    _wait_batches(metrics, epoch)
    return ack


def _assert_a_new_process_resumes_every_change(config: JobConfig, topics: dict[str, str],
                                               workdir: Path) -> None:
    """A real `job run` process, same query and checkpoint: its batches run at the last
    epoch's settings, reading the second input and writing the second output with v2."""
    resumed = changed(config, instance_id="resumed")
    child = start_child("resumed", run_command(resumed), workdir,
                        {"STREAMCTL_CONTROL_KEY": KEY.decode()})
    now_ms = int(time.time() * 1000)  # past the watermark the load's event times set
    late = [replace(txn(900, seq), event_time_ms=now_ms + seq) for seq in range(5)]  # never shed
    try:
        produce_records(config.bootstrap_servers, topics["in2"], ((t.account_id, t) for t in late))
        # A new JVM, the query's start and a cold first batch: 1-2 min idle, far more under a
        # loaded suite (its first batch took 95 s once); a process that died fails at once.
        rows = until(lambda: _scored_for(config, topics["out2"], "acct-900", child), 330,
                     "the new process's output", alive=[child])
        first = next(m for m in decoded(read_committed(config.bootstrap_servers,
                                                       config.topics.metrics_topic), TaskMetrics)
                     if m.instance_id == "resumed" and m.input_rows)
    finally:
        child.stop(30)
    assert [(r.account_seq, r.account_txn_count, r.scorer_version) for r in rows] == [
        (seq, seq + 1, "v2") for seq in range(5)]
    assert (first.config_epoch, first.source_topics, first.max_offsets_per_trigger) == (
        len(ACTIONS), (topics["in2"],), 150)


def _scored_for(config: JobConfig, topic: str, account: str,
                child: Child) -> list[ScoredTransaction] | None:
    assert child.alive(), child.log_tail()
    rows = [r for r in decoded(read_committed(config.bootstrap_servers, topic), ScoredTransaction)
            if r.account_id == account]
    return sorted(rows, key=lambda r: r.account_seq) if len(rows) >= 5 else None


def _wait_batches(metrics: TopicReader, epoch: int) -> None:
    metrics.until(lambda ms: any(m.config_epoch == epoch and m.input_rows > 0
                                 for m in map(metrics_of, ms)), 120)


def _assert_metrics_follow_each_action(batches: dict[int, TaskMetrics], first_input: str,
                                       second_input: str) -> None:
    """Each epoch's batches ran with that epoch's settings."""
    by_epoch: dict[int, list[TaskMetrics]] = {}
    for m in batches.values():
        by_epoch.setdefault(m.config_epoch, []).append(m)
    assert set(by_epoch) == set(range(len(ACTIONS) + 1))
    settings = {e: {(m.input_parallelism, m.state_partitions, m.source_topics)
                    for m in ms} for e, ms in by_epoch.items()}
    assert settings == {0: {(2, 2, (first_input,))}, 1: {(4, 2, (first_input,))},
                        2: {(2, 2, (first_input,))}, 3: {(2, 4, (first_input,))},
                        4: {(2, 2, (first_input,))}, 5: {(2, 2, (first_input,))},
                        **{e: {(2, 2, (second_input,))} for e in range(6, 10)}}
    assert {p.partition for e in range(6, 10) for m in by_epoch[e] for p in m.partitions} == {
        0, 1, 2, 3}
    throttled = sorted((m for e in range(7, 10) for m in by_epoch[e]), key=lambda m: m.batch_id)
    assert all(m.max_offsets_per_trigger == 150 for m in throttled)
    assert all(m.input_rows <= 150 for m in throttled[1:])  # the first may be a replay
    assert sum(m.rows_shed for e in range(8) for m in by_epoch[e]) == 0


def _assert_every_transaction_once_but_the_shed(
        scored: list[ScoredTransaction], acked: dict[str, object], shed: int) -> None:
    ids = [s.txn_id for s in scored]
    assert len(ids) == len(set(ids)), "a transaction was scored twice"
    assert set(ids) <= set(acked), "a transaction nobody produced"
    missing = set(acked) - set(ids)
    assert len(missing) == shed, f"{len(missing)} missing, {shed} shed"
    assert all(acked[t].priority == 0 for t in missing), "a high-priority one is missing"


def _assert_counts_continue_per_account(scored: list[ScoredTransaction]) -> None:
    """Per account, in sequence order: counts 1, 2, 3, … (no reset, gap or double count
    across any change) and the scoring version never goes back from v2 to v1."""
    per_account: dict[str, list[ScoredTransaction]] = {}
    for s in scored:
        per_account.setdefault(s.account_id, []).append(s)
    for account, rows in per_account.items():
        rows.sort(key=lambda s: s.account_seq)
        assert [s.account_txn_count for s in rows] == list(range(1, len(rows) + 1)), account
        versions = [s.scorer_version for s in rows]
        assert versions == sorted(versions), account  # "v1" < "v2"
    assert {s.scorer_version for s in scored} == {"v1", "v2"}

