"""The input source's effects on a checkpoint's log files and the record beside it, with an
in-memory broker's offsets: a switch is recorded before the restart, rolled back exactly when
nothing ran on the new topic, and a restarted process resumes it (no Spark, no Kafka)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streaming_jobs.runtime.checkpoint.input_source import (
    InputSources,
    checkpoint_input,
    committed_offsets,
    entry_sources,
)
from streaming_jobs.runtime.checkpoint.input_switch import (
    CheckpointInput,
    InputSource,
    SwitchRefused,
)


class Offsets:
    """Log ranges per topic, as a broker would report them."""

    def __init__(self, **topics: dict[int, tuple[int, int]]) -> None:
        self.topics = topics

    def log_range(self, topic: str) -> dict[int, tuple[int, int]]:
        if topic not in self.topics:
            raise LookupError(f"topic {topic!r} does not exist")
        return self.topics[topic]


def write_batch(root: Path, batch: int, source_line: str, *, committed: bool,
                version: str = "v2") -> None:
    for log in ("offsets", "commits"):
        (root / log).mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text(f"{version}\n{{}}\n{source_line}\n")
    if committed:
        (root / "commits" / str(batch)).write_text("v1\n{}\n")


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    root = tmp_path / "cp"
    write_batch(root, 0, 'input_0:{"a":{"0":4,"1":2}}', committed=True)
    write_batch(root, 1, 'input_0:{"a":{"0":9,"1":3}}', committed=True)
    return root


def sources(root: Path, offsets: Offsets) -> InputSources:
    inputs = InputSources(str(root), f"{root}.input-source.json", "q", offsets)
    assert inputs.resume("a") is None
    return inputs


def test_offset_log_entries_of_both_formats_are_read(tmp_path: Path) -> None:
    write_batch(tmp_path / "v1", 0, '{"a":{"0":4}}', committed=True, version="v1")
    assert entry_sources(str(tmp_path / "v1"), 0) == {None: {"a": {0: 4}}}
    assert checkpoint_input(str(tmp_path / "v1")) == CheckpointInput(None, "a")
    assert checkpoint_input(str(tmp_path / "none")) is None


def test_committed_offsets_are_the_newest_commit_of_the_source(checkpoint: Path) -> None:
    write_batch(checkpoint, 2, 'input_0:{"a":{"0":12,"1":3}}', committed=False)
    assert committed_offsets(str(checkpoint), InputSource("a", 0)) == {0: 9, 1: 3}
    assert committed_offsets(str(checkpoint), InputSource("b", 1)) == {}


def test_a_switch_is_recorded_before_the_restart_and_a_new_process_resumes_it(
        checkpoint: Path) -> None:
    offsets = Offsets(a={0: (0, 9), 1: (0, 3)}, b={0: (0, 5), 1: (0, 0), 2: (0, 1)})
    inputs = sources(checkpoint, offsets)
    source, note = inputs.for_start("b", "out", last_admitted=None, seen_commit=1)
    assert (source.topic, source.name) == ("b", "input_1")
    assert json.loads(source.starting_offsets) == {"b": {"0": 0, "1": 0, "2": 0}}
    assert note == "a left at {0: 9, 1: 3}, b read from {0: 0, 1: 0, 2: 0}"
    # The process dies before Spark planned a batch on b: the next one completes the switch.
    again = InputSources(str(checkpoint), f"{checkpoint}.input-source.json", "q", offsets)
    assert again.resume("a") == "reading b, as the checkpoint and its input record say, not a"
    assert again.current == inputs.current
    assert again.current.retired == {"a": {0: 9, 1: 3}}


def test_records_that_arrived_after_the_drain_stop_the_switch(checkpoint: Path) -> None:
    inputs = sources(checkpoint, Offsets(a={0: (0, 10), 1: (0, 3)}, b={0: (0, 0)}))
    with pytest.raises(SwitchRefused, match="1 records arrived on a during the switch"):
        inputs.for_start("b", "out", last_admitted=None, seen_commit=1)
    assert inputs.current == InputSource("a", 0)
    assert not Path(f"{checkpoint}.input-source.json").exists()


def test_a_switch_rolls_back_exactly_when_no_batch_ran_on_the_new_topic(
        checkpoint: Path) -> None:
    inputs = sources(checkpoint, Offsets(a={0: (0, 9), 1: (0, 3)}, b={0: (0, 5)}))
    inputs.for_start("b", "out", last_admitted=None, seen_commit=1)
    write_batch(checkpoint, 2, 'input_1:{"b":{"0":5}}', committed=False)  # failed, not run
    source, note = inputs.for_start("a", "out", last_admitted=None, seen_commit=1)
    assert (source.topic, source.name, note) == ("a", "input_0",
                                                "input switch rolled back to a")
    assert not (checkpoint / "offsets" / "2").exists()
    record = json.loads(Path(f"{checkpoint}.input-source.json").read_text())
    assert (record["topic"], record["generation"]) == ("a", 0)


def test_a_batch_that_entered_the_sink_on_the_new_topic_cannot_be_rolled_back(
        checkpoint: Path) -> None:
    inputs = sources(checkpoint, Offsets(a={0: (0, 9), 1: (0, 3)}, b={0: (0, 5)}))
    inputs.for_start("b", "out", last_admitted=None, seen_commit=1)
    write_batch(checkpoint, 2, 'input_1:{"b":{"0":5}}', committed=False)
    with pytest.raises(RuntimeError, match="a batch was planned on b and may have run"):
        inputs.for_start("a", "out", last_admitted=2, seen_commit=1)


def test_records_appended_to_a_retired_topic_are_counted(checkpoint: Path) -> None:
    offsets = Offsets(a={0: (0, 9), 1: (0, 3)}, b={0: (0, 5)})
    inputs = sources(checkpoint, offsets)
    inputs.for_start("b", "out", last_admitted=None, seen_commit=1)
    assert inputs.unread_retired() == {}
    offsets.topics["a"] = {0: (0, 11), 1: (0, 4)}
    assert inputs.unread_retired() == {"a": 3}


def test_going_back_after_a_batch_committed_on_the_new_topic_is_a_new_switch(
        checkpoint: Path) -> None:
    inputs = sources(checkpoint, Offsets(a={0: (0, 9), 1: (0, 3)}, b={0: (0, 5)}))
    inputs.for_start("b", "out", last_admitted=None, seen_commit=1)
    write_batch(checkpoint, 2, 'input_1:{"b":{"0":5}}', committed=True)
    source, note = inputs.for_start("a", "out", last_admitted=None, seen_commit=2)
    assert (source.topic, source.name) == ("a", "input_2")
    assert json.loads(source.starting_offsets) == {"a": {"0": 9, "1": 3}}
    assert note == "b left at {0: 5}, a read from {0: 9, 1: 3}"
    assert inputs.current.retired == {"b": {0: 5}}  # a is read again, no longer retired
