"""The checkpoints hot instances leave behind: removed once no live process holds them, never
the active's own, a live instance's or the one the output's last batch came from; and one
instance id held by one process at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming_jobs.config import instance_dir
from streaming_jobs.runtime.checkpoint.instances import staging_of
from streaming_jobs.runtime.checkpoint.leftovers import (
    InstanceLock,
    InstanceRunning,
    remove_left_behind,
)


def checkpoint(path: str, checkpoint_id: str) -> Path:
    made = Path(path)
    (made / "commits").mkdir(parents=True)
    (made / "metadata").write_text(json.dumps({"id": checkpoint_id}) + "\n")
    return made


def files_beside(query_dir: Path) -> set[str]:
    return {p.name for p in query_dir.parent.iterdir()}


def test_only_the_checkpoints_of_instances_no_longer_running_are_removed(
        tmp_path: Path) -> None:
    query = tmp_path / "q"
    checkpoint(str(query), "shared")
    own = checkpoint(instance_dir(str(query), "a"), "id-a")
    gone = checkpoint(instance_dir(str(query), "b"), "id-b")
    checkpoint(str(gone) + ".previous", "id-b0")
    Path(str(gone) + ".input-source.json").write_text("{}")
    staging_of(gone).mkdir()
    live = checkpoint(instance_dir(str(query), "c"), "id-c")
    wrote_output = checkpoint(instance_dir(str(query), "d"), "id-d")
    holder = InstanceLock(str(live))
    holder.acquire()
    try:
        removed = remove_left_behind(str(query), str(own), output_checkpoint_id="id-d")
    finally:
        holder.release()

    assert removed == [str(gone)]
    assert files_beside(query) == {
        "q", own.name, live.name, live.name + ".lock", wrote_output.name}


def test_a_set_aside_copy_that_wrote_the_output_keeps_its_instance(tmp_path: Path) -> None:
    query = tmp_path / "q"
    own = checkpoint(instance_dir(str(query), "a"), "id-a")
    former = checkpoint(instance_dir(str(query), "b"), "id-b")
    checkpoint(str(former) + ".previous", "id-b0")

    assert remove_left_behind(str(query), str(own), output_checkpoint_id="id-b0") == []
    assert remove_left_behind(str(query), str(own), output_checkpoint_id=None) == [str(former)]


def test_a_second_process_under_one_instance_id_is_refused_by_name(tmp_path: Path) -> None:
    own = instance_dir(str(tmp_path / "q"), "job-2")
    first = InstanceLock(own)
    first.acquire()
    try:
        with pytest.raises(InstanceRunning, match=r"q\.instance-job-2\).*--instance-id"):
            InstanceLock(own).acquire(wait_s=0.3)
    finally:
        first.release()
    second = InstanceLock(own)
    second.acquire(wait_s=0)  # free once the first is gone
    second.release()


def test_an_instance_whose_copy_was_removed_takes_its_lock_afresh(tmp_path: Path) -> None:
    query = tmp_path / "q"
    own = checkpoint(instance_dir(str(query), "a"), "id-a")
    gone = checkpoint(instance_dir(str(query), "b"), "id-b")
    Path(str(gone) + ".lock").touch()  # left by its process, which died

    assert remove_left_behind(str(query), str(own), None) == [str(gone)]
    assert files_beside(query) == {own.name}
    back = InstanceLock(str(gone))
    back.acquire(wait_s=0)
    try:
        assert remove_left_behind(str(query), str(own), None) == []  # held now
    finally:
        back.release()
