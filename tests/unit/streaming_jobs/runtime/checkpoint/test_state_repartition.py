"""The repartition preconditions on checkpoint files laid out as Spark writes them (no Spark):
batch logs ignore .crc and temporary files, the partitions and provider come from the newest
offset-log entry, and each violated precondition has its own error naming the checkpoint; and
the one batch a quiesce may leave planned past the last commit, removed only when it never
entered the sink."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from streaming_jobs.runtime.checkpoint.state_repartition import (
    ROCKSDB_PROVIDER,
    LastBatchNotCommitted,
    QueryStillRunning,
    TargetOutOfBounds,
    UnsupportedCheckpoint,
    align,
    check_preconditions,
    current,
    discard_unexecuted_batch,
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
    ({"planned": -1, "committed": -1}, "no batch has committed"),
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


# -- making a quiesced checkpoint end on a committed batch: only a batch this process planned
# after a commit it saw, and that never entered the sink, is removed from the offset log

def bare_logs(tmp_path: Path, planned: int, committed: int) -> Path:
    """Offset and commit logs with their checksum files, nothing else."""
    for log, last in (("offsets", planned), ("commits", committed)):
        (tmp_path / log).mkdir()
        for batch in range(last + 1):
            (tmp_path / log / str(batch)).write_text("v1\n{}\n")
            (tmp_path / log / f".{batch}.crc").write_bytes(b"crc")
    return tmp_path


@pytest.mark.parametrize("last_admitted", [None, 4])  # never admitted, or the gate refused it
def test_a_batch_that_never_entered_the_sink_is_removed_with_its_checksum(
        tmp_path: Path, last_admitted: int | None) -> None:
    root = bare_logs(tmp_path, planned=5, committed=4)
    assert discard_unexecuted_batch(str(root), last_admitted=last_admitted, seen_commit=4) == 5
    assert sorted(p.name for p in (root / "offsets").iterdir()) == sorted(
        [str(b) for b in range(5)] + [f".{b}.crc" for b in range(5)])


@pytest.mark.parametrize(("planned", "committed", "last_admitted", "seen_commit"), [
    (5, 4, 5, 4),     # it entered the sink: it may have written output
    (5, 4, None, None),  # no commit seen by this process: another process's batch (a crash)
    (4, 4, None, 4),  # the last batch committed: nothing to remove
    (6, 4, None, 4),  # two batches past the commit: not ours alone
])
def test_anything_else_is_left_for_spark_to_refuse(
        tmp_path: Path, planned: int, committed: int, last_admitted: int | None,
        seen_commit: int | None) -> None:
    root = bare_logs(tmp_path, planned, committed)
    assert discard_unexecuted_batch(str(root), last_admitted=last_admitted,
                                    seen_commit=seen_commit) is None
    assert (root / "offsets" / str(planned)).exists()


def test_a_checkpoint_with_no_batch_planned_has_no_partitions_yet(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    assert current(str(tmp_path)) is None


def test_a_target_set_before_the_first_batch_is_the_number_the_query_starts_with(
        tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    conf: dict[str, str] = {}
    spark: Any = SimpleNamespace(conf=SimpleNamespace(set=conf.__setitem__))
    assert align(spark, str(tmp_path), 8, last_admitted=None, seen_commit=None,
                 max_partitions=16) is None
    assert conf == {"spark.sql.shuffle.partitions": "8"}


def test_a_first_batch_planned_but_not_committed_keeps_its_partitions(tmp_path: Path) -> None:
    """It runs again as planned, with the partitions its offset-log entry records."""
    cp = checkpoint(tmp_path, planned=0, committed=-1, partitions=4, state=False)
    assert current(cp) == 4
    conf: dict[str, str] = {}
    spark: Any = session()
    spark.conf = SimpleNamespace(set=conf.__setitem__)
    with pytest.raises(LastBatchNotCommitted, match="last batch 0 did not commit"):
        align(spark, cp, 8, last_admitted=None, seen_commit=None, max_partitions=16)
    assert conf == {} and current(cp) == 4
