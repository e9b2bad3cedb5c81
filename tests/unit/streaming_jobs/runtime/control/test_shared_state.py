"""The desired state persisted beside the checkpoint: atomic, read back, checked against
today's bounds, and converted to the published record."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from schemas.codec import Codec, codec_for
from schemas.records import DesiredStateRecord
from streaming_jobs.runtime.control import shared_state as desired
from streaming_jobs.runtime.desired.state import Bounds, DesiredState, Limits

CONFIGURED = DesiredState(epoch=0, input_parallelism=2, state_partitions=4,
                          max_offsets_per_trigger=4000, shed_fraction=0.0, udf_version="v1",
                          input_topic="in", output_topic="out", executors=0)
APPLIED = replace(CONFIGURED, epoch=9, input_parallelism=6, max_offsets_per_trigger=800,
                  shed_fraction=0.25, udf_version="v2", output_topic="out-2")
LIMITS = Limits(task_slots=16, udf_versions=("v1", "v2"), master="local[16]",
                bounds=Bounds(max_executors=8), unsupported=(("state_partitions", "not yet"),))


def test_saved_state_comes_back_with_its_epoch(tmp_path: Path) -> None:
    path = str(tmp_path / "ckpt.desired-state.json")
    desired.save(path, "q", APPLIED)
    assert desired.load(path, "q", CONFIGURED, LIMITS) == APPLIED
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.desired-state.json"]  # no temp left
    desired.save(path, "q", replace(APPLIED, epoch=10))
    assert desired.load(path, "q", CONFIGURED, LIMITS) == replace(APPLIED, epoch=10)


def test_no_file_means_the_configured_state(tmp_path: Path) -> None:
    assert desired.load(str(tmp_path / "none.json"), "q", CONFIGURED, LIMITS) is None


def test_values_out_of_todays_bounds_fall_back_to_the_configured_ones(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "s.json")
    desired.save(path, "q", replace(APPLIED, input_parallelism=12, state_partitions=32))
    restored = desired.load(path, "q", CONFIGURED, replace(LIMITS, task_slots=8))
    assert restored == replace(APPLIED, input_parallelism=2)  # state_partitions: not changeable
    assert "input_parallelism=12 is out of today's bounds" in caplog.text


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "cannot read the desired state"),
    (json.dumps({"query_id": "other", "epoch": 3}), "holds the desired state of query other"),
])
def test_an_unreadable_or_foreign_file_is_an_error_naming_it(tmp_path: Path, content: str,
                                                             message: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(desired.DesiredStateFileError, match=message):
        desired.load(str(path), "q", CONFIGURED, LIMITS)


def test_the_published_record_round_trips() -> None:
    record = desired.to_record(APPLIED, query_id="q", instance_id="i", control_id="c-9",
                               at_ms=1_700_000_000_000)
    codec = codec_for(DesiredStateRecord)
    assert codec.decode(codec.encode(record)) == record
    assert (record.epoch, record.shed_fraction, record.output_topic) == (9, 0.25, "out-2")


def test_on_a_cluster_a_requested_executor_count_comes_back_and_none_requested_is_silent(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cluster = replace(LIMITS, master="spark://m:7077")
    path = str(tmp_path / "s.json")
    desired.save(path, "q", replace(APPLIED, executors=3))
    assert desired.load(path, "q", CONFIGURED, cluster) == replace(APPLIED, executors=3)
    desired.save(path, "q", APPLIED)  # executors 0: nothing was ever requested
    assert desired.load(path, "q", CONFIGURED, cluster) == APPLIED
    assert "out of today's bounds" not in caplog.text

def test_the_file_never_goes_back_to_an_older_epoch(tmp_path: Path) -> None:
    """A former active that wakes after a failover cannot undo the promotion's record."""
    path = str(tmp_path / "ckpt.desired-state.json")
    promoted = replace(APPLIED, epoch=12, active_instance="b")
    desired.save(path, "q", promoted)
    with pytest.raises(desired.StaleWrite, match=r"holds epoch 12 .*active instance b.*newer "
                                                  r"than 9"):
        desired.save(path, "q", APPLIED)
    desired.save(path, "q", promoted)  # the same epoch again: the owner re-recording it
    assert desired.load(path, "q", CONFIGURED, LIMITS) == promoted
    assert desired.read_owner(path, "q") == ("b", 12)


@pytest.mark.parametrize(("on_disk", "me", "my_epoch", "superseded"), [
    (None, "a", 3, False),                    # no file yet: nobody else named
    (("", 5), "a", 3, False),                 # no failover yet
    (("a", 5), "a", 5, False),                # named: it is this instance
    (("b", 5), "a", 3, True),                 # b was promoted after this instance's epoch
    (("b", 5), "a", 5, True),
    (("b", 2), "a", 3, False),                # an older write naming b: stale, ignored
])
def test_superseded_when_another_instance_is_named_at_a_later_epoch(
        tmp_path: Path, on_disk: tuple[str, int] | None, me: str, my_epoch: int,
        superseded: bool) -> None:
    path = str(tmp_path / "s.json")
    if on_disk is not None:
        desired.save(path, "q", replace(APPLIED, active_instance=on_disk[0], epoch=on_disk[1]))
    reason = desired.superseded_by(path, "q", me, my_epoch)
    assert (reason is not None) == superseded
    if reason is not None:
        assert reason == (f"instance b was made active at epoch {on_disk[1]} (this instance "
                          f"runs epoch {my_epoch})")


def test_a_file_from_before_failover_existed_names_nobody(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    desired.save(str(path), "q", APPLIED)
    data = json.loads(path.read_text())
    del data["active_instance"]
    path.write_text(json.dumps(data))
    assert desired.load(str(path), "q", CONFIGURED, LIMITS) == APPLIED
    assert desired.read_owner(str(path), "q") == ("", 9)


def test_a_record_of_the_previous_schema_reads_as_naming_nobody() -> None:
    old = json.loads(resources.files("schemas").joinpath(
        "history/desired_state.1.avsc").read_text())
    record = desired.to_record(APPLIED, query_id="q", instance_id="i", control_id=None,
                               at_ms=1_700_000_000_000)
    fields = {k: v for k, v in record.to_avro().items() if k != "active_instance"}
    written = Codec(DesiredStateRecord, schema=old)
    payload = written.encode(DesiredStateRecord(**fields))
    assert codec_for(DesiredStateRecord).decode(payload) == record


def test_job_state_names_the_active_instance_once_there_was_a_failover() -> None:
    from streaming_jobs.state_cli import describe

    record = desired.to_record(APPLIED, query_id="q", instance_id="i", control_id=None,
                               at_ms=1_700_000_000_000)
    assert "active_instance          (no failover yet)" in describe(record)
    promoted = replace(record, active_instance="b", epoch=12)
    assert describe(promoted).splitlines()[-1] == "  active_instance          b"
