"""Making a quiesced checkpoint end on a committed batch: only a batch this process planned
after a commit it saw, and that never entered the sink, is removed from the offset log (no
Spark: a checkpoint's log files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming_jobs.runtime.checkpoint.state_repartition import current, discard_unexecuted_batch


def checkpoint(tmp_path: Path, planned: int, committed: int) -> Path:
    for log, last in (("offsets", planned), ("commits", committed)):
        (tmp_path / log).mkdir()
        for batch in range(last + 1):
            (tmp_path / log / str(batch)).write_text("v1\n{}\n")
            (tmp_path / log / f".{batch}.crc").write_bytes(b"crc")
    return tmp_path


@pytest.mark.parametrize("last_admitted", [None, 4])  # never admitted, or the gate refused it
def test_a_batch_that_never_entered_the_sink_is_removed_with_its_checksum(
        tmp_path: Path, last_admitted: int | None) -> None:
    root = checkpoint(tmp_path, planned=5, committed=4)
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
    root = checkpoint(tmp_path, planned, committed)
    assert discard_unexecuted_batch(str(root), last_admitted=last_admitted,
                                    seen_commit=seen_commit) is None
    assert (root / "offsets" / str(planned)).exists()


def test_a_checkpoint_without_a_commit_has_no_partitions_yet(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    assert current(str(tmp_path)) is None
