"""The repartition preconditions on checkpoint files laid out as Spark writes them (no Spark):
batch logs ignore .crc and temporary files, the partitions and provider come from the newest
offset-log entry, and each violated precondition has its own error naming the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from streaming_jobs.runtime.checkpoint.state_repartition import (
    ROCKSDB_PROVIDER,
    LastBatchNotCommitted,
    QueryStillRunning,
    TargetOutOfBounds,
    UnsupportedCheckpoint,
    check_preconditions,
    local_path,
    read_batches,
    read_state_partitions,
    repartition_state,
)

QUERY_ID = "5b1c3b8e-0000-4000-8000-000000000001"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def checkpoint(root: Path, planned: int, committed: int, partitions: int = 4,
               provider: str = ROCKSDB_PROVIDER, state: bool = True) -> str:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": QUERY_ID}) + "\n")
    if state:
        (root / "state" / "0" / "0").mkdir(parents=True)
    for batch in range(planned + 1):
        conf = {"spark.sql.shuffle.partitions": str(partitions),
                "spark.sql.streaming.stateStore.providerClass": provider}
        (root / "offsets" / str(batch)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": conf})
            + '\n{"topic":{"0":10}}')
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    for batch in range(committed + 1):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "commits" / ".9.tmp").write_text("half-written")
    return str(root)


def session(*running_ids: str) -> SimpleNamespace:
    queries = [SimpleNamespace(id=i, name="fraud-detection") for i in running_ids]
    return SimpleNamespace(streams=SimpleNamespace(active=queries))


def test_batches_and_partitions_are_read_from_the_logs(tmp_path: Path) -> None:
    cp = checkpoint(tmp_path, planned=5, committed=4, partitions=8)
    batches = read_batches(cp)
    assert (batches.last_planned, batches.last_committed) == (5, 4)
    assert read_state_partitions(cp) == 8
    assert read_state_partitions(f"file://{cp}") == 8


def test_an_uncommitted_last_batch_is_refused_with_its_id(tmp_path: Path) -> None:
    cp = checkpoint(tmp_path, planned=5, committed=4)
    with pytest.raises(LastBatchNotCommitted, match="last batch 5 did not commit") as err:
        check_preconditions(session(), cp, 8, 64)  # type: ignore[arg-type]
    assert err.value.batch_id == 5 and err.value.checkpoint_dir == cp


def test_a_running_query_is_refused(tmp_path: Path) -> None:
    cp = checkpoint(tmp_path, planned=2, committed=2)
    with pytest.raises(QueryStillRunning, match="fraud-detection"):
        check_preconditions(session(QUERY_ID), cp, 8, 64)  # type: ignore[arg-type]
    assert check_preconditions(session("another-query"), cp, 8, 64) == 4  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"provider": HDFS}, "HDFSBackedStateStoreProvider"),
    ({"state": False}, "keeps no state"),
    ({"committed": -1}, "no batch has committed"),
])
def test_unsupported_checkpoints_say_why(tmp_path: Path, kwargs: dict, problem: str) -> None:
    cp = checkpoint(tmp_path, **{"planned": 1, "committed": 1, **kwargs})
    with pytest.raises(UnsupportedCheckpoint, match=problem):
        check_preconditions(session(), cp, 8, 64)  # type: ignore[arg-type]


def test_targets_out_of_bounds_are_refused(tmp_path: Path) -> None:
    cp = checkpoint(tmp_path, planned=1, committed=1)
    for bad in (0, -3, 65):
        with pytest.raises(TargetOutOfBounds, match=rf"{bad} state partitions .*\[1, 64\]"):
            check_preconditions(session(), cp, bad, 64)  # type: ignore[arg-type]


def test_the_current_number_is_an_unchanged_result_without_calling_spark(tmp_path: Path) -> None:
    cp = checkpoint(tmp_path, planned=3, committed=3, partitions=4)
    result = repartition_state(session(), cp, 4)  # type: ignore[arg-type]
    assert (result.changed, result.old_partitions, result.duration_ms) == (False, 4, 0)


def test_only_local_checkpoints(tmp_path: Path) -> None:
    assert local_path("file:///tmp/cp") == Path("/tmp/cp")
    with pytest.raises(UnsupportedCheckpoint, match="s3a://"):
        local_path("s3a://bucket/cp")
