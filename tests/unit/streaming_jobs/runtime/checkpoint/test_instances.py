"""The instances' own checkpoints with a hot standby, on files laid out as Spark writes them:
which checkpoint a marker names, whether a standby's batch is covered by the active's commits,
a copy at a committed batch, and a checkpoint made to continue exactly where the output ends."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from streaming_jobs.config import instance_dir
from streaming_jobs.runtime.checkpoint import instances
from streaming_jobs.runtime.checkpoint.input_source import entry_sources
from streaming_jobs.runtime.checkpoint.instances import (
    PREVIOUS_SUFFIX,
    NotContinuable,
    active_checkpoint,
    behind,
    checkpoint_id,
    checkpoint_with_id,
    committed_ends,
    continue_output,
    copy_committed,
    covered,
    entry_metadata,
    watermark_ms,
)
from streaming_jobs.runtime.checkpoint.state_repartition import read_batches


def checkpoint(root: Path, ends: list[dict[int, int]], committed: int, query_id: str,
               topic: str = "in", watermarks: list[int] | None = None,
               partitions: int = 2) -> str:
    """Batch n reads `topic` up to `ends[n]` with watermark `watermarks[n]` (0); batches up to
    `committed` committed; state versions 1 and 2 (+ a shared SST file)."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    (root / ".metadata.crc").write_bytes(b"crc")
    (root / "state" / "0" / "0").mkdir(parents=True)
    for name in ("1.delta", "2.zip", ".2.zip.crc", "SSTs/9-x.sst"):
        (root / "state" / "0" / "0" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "state" / "0" / "0" / name).write_bytes(b"state")
    for batch, offsets in enumerate(ends):
        watermark = (watermarks or [0] * len(ends))[batch]
        (root / "offsets" / str(batch)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": watermark, "batchTimestampMs": 1,
                                 "conf": {"spark.sql.shuffle.partitions": str(partitions)}})
            + "\n" + json.dumps({topic: {str(p): o for p, o in offsets.items()}}))
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    for batch in range(committed + 1):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    Path(str(root) + ".input-source.json").write_text('{"topic": "in"}')
    return str(root)


@pytest.mark.parametrize(("wanted", "reached", "expected"), [
    ({"in": {0: 5, 1: 7}}, {"in": {0: 5, 1: 9}}, True),
    ({"in": {0: 6, 1: 7}}, {"in": {0: 5, 1: 9}}, False),   # one partition ahead
    ({"in": {0: 5, 2: 1}}, {"in": {0: 5, 1: 9}}, False),   # a partition not read yet
    ({"other": {0: 1}}, {"in": {0: 5}}, False),            # another topic
    ({}, {}, True),
])
def test_a_batch_is_covered_only_when_every_partition_is_at_or_behind_the_active(
        wanted: dict[str, dict[int, int]], reached: dict[str, dict[int, int]],
        expected: bool) -> None:
    assert covered(wanted, reached) is expected


def test_a_copy_ends_at_the_committed_batch_under_an_id_of_its_own(tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    active = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 20}, {0: 30}], 0, "id-a")
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 5}], 0, "id-b")
    assert copy_committed(active, standby) == 0
    assert read_batches(standby).last_planned == read_batches(standby).last_committed == 0
    assert checkpoint_id(standby) not in (None, "id-a", "id-b")
    assert not (Path(standby) / ".metadata.crc").exists()  # Hadoop would refuse the new id
    state = sorted(p.name for p in (Path(standby) / "state" / "0" / "0").rglob("*"))
    assert state == ["1.delta", "9-x.sst", "SSTs"]  # version 2 came from the source's batch 1
    assert Path(standby + ".input-source.json").is_file()
    assert read_batches(active).last_planned == 2  # the source is left as it was
    # The checkpoint it replaced is kept aside, found by its id (it may hold the output's end).
    assert checkpoint_with_id(query, "id-b") == standby + ".previous"
    assert checkpoint_with_id(query, "id-a") == active
    assert checkpoint_with_id(query, "id-x") is None


def test_a_standby_continues_where_the_output_ends_folding_in_its_trail(
        tmp_path: Path) -> None:
    """The standby committed up to 20 and planned a batch to 35; the output holds up to 30:
    its next batch is rewritten to end at 30 and marked as in the output."""
    query = str(tmp_path / "q")
    active = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 30}], 1, "id-a",
                        watermarks=[0, 700])
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 10}, {0: 20}, {0: 35}], 1, "id-b",
                         watermarks=[0, 400, 900])
    marks: list[tuple[str, int]] = []
    note = continue_output(standby, query, ("id-a", 1), lambda *m: marks.append(m))
    assert marks == [("id-b", 2)]
    assert entry_sources(standby, 2) == {None: {"in": {0: 30}}}
    assert watermark_ms(standby, 2) == 700  # the writer's: it closes what the writer closed
    assert not (Path(standby) / "offsets" / ".2.crc").exists()
    assert note == (f"continued the output of batch 1 of {active}: state kept: 10 records after "
                    "it folded in without output")
    marks.clear()  # its own marker now: nothing more to do
    assert continue_output(standby, query, ("id-b", 2), lambda *m: marks.append(m)) is None
    assert marks == []


def test_a_checkpoint_ahead_of_the_output_is_replaced_by_a_copy_of_the_writers(
        tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    active = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 30}, {0: 40}], 1, "id-a")
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 50}], 0, "id-b")
    marks: list[tuple[str, int]] = []
    note = continue_output(standby, query, ("id-a", 2), lambda *m: marks.append(m))
    copied_id = checkpoint_id(standby)
    assert marks == [(copied_id, 2)] and copied_id not in ("id-a", "id-b")
    assert entry_sources(standby, 2) == {None: {"in": {0: 40}}}
    assert note is not None and f"state copied from {active} at its batch 1" in note


def test_a_standby_runs_a_batch_once_the_active_committed_its_records_and_its_watermark(
        tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    active = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 30}], 1, "id-a",
                        watermarks=[0, 500])
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 10}, {0: 20}, {0: 20}], 0, "id-b",
                         watermarks=[0, 500, 800])
    assert behind(standby, 1, active)
    # Batch 2 reads nothing new but closes windows up to 800, which the active has not yet.
    assert not behind(standby, 2, active)


def test_a_checkpoint_at_the_outputs_offsets_still_takes_the_writers_watermark(
        tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 20}], 1, "id-a", watermarks=[0, 600])
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 10}, {0: 20}], 1, "id-b",
                         watermarks=[0, 300])
    marks: list[tuple[str, int]] = []
    continue_output(standby, query, ("id-a", 1), lambda *m: marks.append(m))
    assert marks == [("id-b", 2)] and entry_sources(standby, 2) == {None: {"in": {0: 20}}}
    assert watermark_ms(standby, 2) == 600


def test_a_checkpoint_with_other_state_partitions_than_the_writers_is_replaced_by_a_copy(
        tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 20}], 1, "id-a", partitions=4)
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 10}], 0, "id-b", partitions=2)
    note = continue_output(standby, query, ("id-a", 1), lambda *m: None)
    assert note is not None and "state copied from" in note
    assert json.loads(entry_metadata(standby, 1))["conf"] == {
        "spark.sql.shuffle.partitions": "4"}


def repartitioned(root: str, partitions: int) -> None:
    """What Spark's state repartition leaves: an input-less batch after the last committed one,
    at the same offsets and watermark, planned and committed with `partitions`."""
    offsets, commits = Path(root) / "offsets", Path(root) / "commits"
    last = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    version, stamp, *sources = (offsets / str(last)).read_text().splitlines()
    metadata = json.loads(stamp) | {"conf": {"spark.sql.shuffle.partitions": str(partitions)}}
    (offsets / str(last + 1)).write_text("\n".join([version, json.dumps(metadata), *sources]))
    (commits / str(last + 1)).write_text((commits / str(last)).read_text())


def test_a_writer_repartitioned_after_its_last_output_is_continued_from_a_copy(
        tmp_path: Path) -> None:
    """The active repartitioned its state (2 → 4) and died before its next batch: the output
    ends at batch 1 (2 partitions), its checkpoint at the repartition's batch 2 (4). A hot
    standby at 2 takes a copy rather than folding (the query stays at 4), one at 4 folds, and
    a warm one continues its copy."""
    query = str(tmp_path / "q")
    writer = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 20}], 1, "id-a")
    repartitioned(writer, 4)
    hot = checkpoint(Path(instance_dir(query, "b")), [{0: 10}], 0, "id-b")
    at_four = checkpoint(Path(instance_dir(query, "c")), [{0: 10}], 0, "id-c", partitions=4)
    note = continue_output(at_four, query, ("id-a", 1), lambda *m: None)
    assert note is not None and "state kept: 10 records" in note, note
    marks: list[tuple[str, int]] = []
    for own, warm in ((hot, False), (query, True)):
        marks.clear()
        note = continue_output(own, query, ("id-a", 1), lambda *m: marks.append(m), warm=warm)
        assert note is not None and f"state copied from {writer} at its batch 2" in note, note
        assert marks == [(checkpoint_id(own), 2)]  # nothing left to read: the copy's batch 2
        assert json.loads(entry_metadata(own, 2))["conf"] == {
            "spark.sql.shuffle.partitions": "4"}


def test_a_writer_whose_last_commit_cannot_be_read_is_left_to_a_copy(tmp_path: Path) -> None:
    """Set aside while a hot standby compares partitions with it: no fold, and no failure
    other than the one that makes the promotion take a copy (found again by its id)."""
    query = str(tmp_path / "q")
    writer = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 20}], 1, "id-a")
    hot = checkpoint(Path(instance_dir(query, "b")), [{0: 10}], 0, "id-b")
    (Path(writer) / "offsets" / "1").unlink()
    with pytest.raises(NotContinuable, match=f"cannot compare the state partitions of {hot}"):
        instances._same_partitions(hot, writer)


def test_a_checkpoint_set_aside_is_no_active_and_survives_a_copy_into_nothing(
        tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    active = checkpoint(Path(instance_dir(query, "a")), [{0: 10}], 0, "id-a")
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 10}, {0: 30}], 1, "id-b")
    copy_committed(active, standby)  # id-b set aside, newer commits than the active's
    assert active_checkpoint(query, instance_dir(query, "c"), "") == active
    shutil.rmtree(standby)
    copy_committed(active, standby)  # nothing to set aside: id-b stays
    assert checkpoint_with_id(query, "id-b") == standby + ".previous"


def test_an_output_written_by_a_checkpoint_no_longer_there_is_not_continued(
        tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    standby = checkpoint(Path(instance_dir(query, "b")), [{0: 10}], 0, "id-b")
    with pytest.raises(NotContinuable, match="written by checkpoint id-gone, which is not "
                                             "beside"):
        continue_output(standby, query, ("id-gone", 4), lambda *m: None)


def test_a_warm_instances_checkpoint_takes_a_copy_of_the_instance_that_wrote_the_output(
        tmp_path: Path) -> None:
    """A warm instance promoted after a hot active (a rolling change of `standby`): the shared
    checkpoint, far behind or missing, is replaced by a copy of the writer's, never folded
    forward (that would read again everything the writer read)."""
    query = str(tmp_path / "q")
    writer = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 30}, {0: 40}], 1, "id-a")
    marks: list[tuple[str, int]] = []
    for shared in (checkpoint(Path(query), [{0: 10}], 0, "id-shared"), None):
        if shared is None:  # hot instances only, before: no shared checkpoint at all
            shutil.rmtree(query)
        marks.clear()
        note = continue_output(query, query, ("id-a", 2), lambda *m: marks.append(m),
                               warm=True)
        copied_id = checkpoint_id(query)
        assert marks == [(copied_id, 2)] and copied_id not in ("id-a", "id-shared")
        assert entry_sources(query, 2) == {None: {"in": {0: 40}}}
        assert note is not None and f"state copied from {writer} at its batch 1" in note


def test_a_writer_set_aside_while_it_is_copied_is_copied_again_from_where_it_went(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm instance promoted while the former hot active steps down: that one replaces its
    checkpoint (the writer) by a copy of its own mid-copy; the copy is made again from the
    writer's new place (`<it>.previous`), never left short of the files that moved."""
    query = str(tmp_path / "q")
    writer = checkpoint(Path(instance_dir(query, "a")), [{0: 10}, {0: 30}, {0: 40}], 1, "id-a")
    copy_file = instances._copy_if_present
    moved = []

    def stepping_down(src: str, dst: str) -> None:
        if not moved:  # the former active sets its checkpoint aside and copies over it
            moved.append(True)
            os.rename(writer, writer + PREVIOUS_SUFFIX)
            checkpoint(Path(writer), [{0: 10}], 0, "id-a-new")
        copy_file(src, dst)
    monkeypatch.setattr(instances, "_copy_if_present", stepping_down)
    marks: list[tuple[str, int]] = []

    note = continue_output(query, query, ("id-a", 2), lambda *m: marks.append(m), warm=True)

    assert moved and note is not None
    assert f"state copied from {writer}{PREVIOUS_SUFFIX} at its batch 1" in note
    assert entry_sources(query, 2) == {None: {"in": {0: 40}}}
    assert marks == [(checkpoint_id(query), 2)]


def test_a_writer_no_longer_there_is_nothing_to_continue_for_a_warm_instance(
        tmp_path: Path) -> None:
    """A warm instance whose output's last batch came from a checkpoint the query left behind
    (deleted, or a query id reused) goes on from its own, as before hot standbys."""
    query = str(tmp_path / "q")
    shared = checkpoint(Path(query), [{0: 10}], 0, "id-shared")
    marks: list[tuple[str, int]] = []
    assert continue_output(shared, query, ("id-gone", 4), lambda *m: marks.append(m),
                           warm=True) is None
    assert marks == []


def test_a_checkpoint_with_nothing_committed_cannot_be_copied(tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    active = checkpoint(Path(instance_dir(query, "a")), [{0: 10}], -1, "id-a")
    assert committed_ends(active) is None
    with pytest.raises(NotContinuable, match="no committed batch"):
        copy_committed(active, instance_dir(query, "b"))


def test_the_active_checkpoint_is_the_named_instances_else_the_other_with_commits(
        tmp_path: Path) -> None:
    query = str(tmp_path / "q")
    a = checkpoint(Path(instance_dir(query, "a")), [{0: 10}], 0, "id-a")
    b = instance_dir(query, "b")
    assert active_checkpoint(query, b, "") == a
    assert active_checkpoint(query, b, "a") == a
    assert active_checkpoint(query, a, "") is None        # nobody else has committed
    assert active_checkpoint(query, b, "c") is None       # named, not started yet


def test_a_warm_active_beside_hot_standbys_is_trailed_on_the_shared_checkpoint(
        tmp_path: Path) -> None:
    """A rolling change of `standby`: the named active is warm, so it writes the shared
    checkpoint, even when an own checkpoint of its hot past is still beside it."""
    query = str(tmp_path / "q")
    b = instance_dir(query, "b")
    shared = checkpoint(Path(query), [{0: 10}], 0, "id-shared")
    assert active_checkpoint(query, b, "w") == shared
    stale = checkpoint(Path(instance_dir(query, "w")), [{0: 5}], 0, "id-w")
    os.utime(Path(stale) / "commits", (1, 1))
    assert active_checkpoint(query, b, "w") == shared
    os.utime(Path(shared) / "commits", (0, 0))  # hot again: its own is the newer
    assert active_checkpoint(query, b, "w") == stale


def test_the_active_checkpoint_is_found_from_a_relative_checkpoint_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    checkpoint(Path("q.instance-a"), [{0: 10}], 0, "id-a")
    assert active_checkpoint("./q", "./q.instance-b", "a") == "q.instance-a"
    assert active_checkpoint("./q", "./q.instance-b", "") == "q.instance-a"
    assert active_checkpoint("./q", "./q.instance-a", "a") is None  # itself
