"""The query's input source across restarts and switches: the effects around `input_switch`.

Owns the input record beside the checkpoint (`<checkpoint-dir>.input-source.json`: the topic,
the source's generation, where a source new to the checkpoint starts, the retired topics and
where the job left them), written *before* a restart that switches (so a process that crashes
right after still completes the switch exactly), reading the sources and offsets a checkpoint
recorded, the drain wait and the cut. Neighbours: `input_switch` (the decisions), `lifecycle`
(asks for the input of each start), `kafka.KafkaLogRanges` (log offsets), `state_repartition`
(removes a batch that was planned but never executed).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Protocol

from streaming_jobs.runtime.checkpoint.files import write_json_atomically
from streaming_jobs.runtime.checkpoint.input_switch import (
    CheckpointInput,
    DrainSample,
    InputSource,
    KafkaInput,
    LogRange,
    NotDrained,
    Offsets,
    SwitchRefused,
    backlog,
    cut,
    describe,
    drain_state,
    generation_of,
    resume,
    start_offsets,
)
from streaming_jobs.runtime.checkpoint.retention import Deleted, deleted
from streaming_jobs.runtime.checkpoint.state_repartition import (
    discard_unexecuted_batch,
    local_path,
    read_batches,
)

log = logging.getLogger(__name__)
FORMAT_VERSION = 1
DRAIN_POLL_S = 0.5


class LogRanges(Protocol):
    """The broker's log offsets of a topic (`kafka.KafkaLogRanges`)."""

    def log_range(self, topic: str) -> LogRange: ...


class InputSources:
    """The input in force for one query and checkpoint; `resume` first."""

    def __init__(self, checkpoint_dir: str, record_path: str, query_id: str,
                 offsets: LogRanges) -> None:
        self._checkpoint, self._path, self._query_id = checkpoint_dir, record_path, query_id
        self._offsets = offsets
        self.current = InputSource("", 0)
        self._previous: InputSource | None = None
        """The source before the last switch, while that switch may still be rolled back."""

    def resume(self, wanted: str) -> str | None:
        """Take the input the checkpoint and the record imply; a note if it is not `wanted`.
        Raises SwitchRefused when they contradict each other."""
        self.current, note = resume(checkpoint_input(self._checkpoint), self._load(), wanted)
        return note

    def unsupported(self) -> str | None:
        if self.current.generation is None:
            return ("the checkpoint's source is unnamed (written before named sources); Spark "
                    "can switch only a named source")
        return None

    def drain(self, target: str, output_topic: str, quiet_s: float, timeout_s: float) -> str:
        """Wait until the current topic is drained; raises SwitchRefused (nothing changed)."""
        try:
            start_offsets(self.current, target, self._offsets.log_range(target), output_topic)
        except LookupError as exc:
            raise SwitchRefused(str(exc)) from exc
        began = time.monotonic()
        samples: list[DrainSample] = []
        while True:
            samples.append(DrainSample(time.monotonic(), self._committed(),
                                       self._offsets.log_range(self.current.topic)))
            verdict = drain_state(samples, quiet_s)
            waited_s = time.monotonic() - began
            if not isinstance(verdict, NotDrained):
                return f"{self.current.topic} drained in {waited_s * 1000:.0f} ms"
            if waited_s >= timeout_s:
                raise SwitchRefused(describe(verdict, self.current.topic, target, waited_s))
            time.sleep(DRAIN_POLL_S)

    def for_start(self, target: str, output_topic: str, *, last_admitted: int | None,
                  seen_commit: int | None) -> tuple[KafkaInput, str | None]:
        """The input of a (stopped) query's next run reading `target`, switching or rolling a
        switch back if it is another topic; a note for the ack when something changed.

        Going back to the previous topic before any batch committed on the current one
        restores the previous source as it was (a rollback); later, it is a new switch.
        """
        if target == self.current.topic:
            return self.current.kafka_input(), None
        discard_unexecuted_batch(
            self._checkpoint, last_admitted=last_admitted, seen_commit=seen_commit)
        committed = self._committed()
        if (self._previous is not None and target == self._previous.topic
                and not committed):  # nothing ran on the current topic: undo
            return self._roll_back()
        old_log = self._offsets.log_range(self.current.topic)
        cut(self.current, committed, old_log)
        start = start_offsets(self.current, target, self._offsets.log_range(target),
                              output_topic)
        left_at = {p: committed.get(p, low) for p, (low, _high) in old_log.items()}
        self._previous, self.current = self.current, self.current.switched(target, start,
                                                                             left_at)
        self._save()
        return self.current.kafka_input(), (f"{self._previous.topic} left at {_text(left_at)}, "
                                            f"{target} read from {_text(start)}")

    def _roll_back(self) -> tuple[KafkaInput, str | None]:
        previous, planned = self._previous, checkpoint_input(self._checkpoint)
        assert previous is not None
        if planned is not None and planned.generation == self.current.generation:
            raise RuntimeError(f"cannot roll the input back to {previous.topic}: a batch was "
                               f"planned on {self.current.topic} and may have run; restart "
                               f"the job to continue on {self.current.topic}")
        self.current, self._previous = previous, None
        self._save()
        return self.current.kafka_input(), f"input switch rolled back to {previous.topic}"

    def unread_retired(self) -> dict[str, int]:
        """Per retired topic, records appended after the job left it (they are not read)."""
        unread = {}
        for topic, left_at in self.current.retired.items():
            try:
                count = backlog(left_at, self._offsets.log_range(topic))
            except LookupError:
                continue  # deleted: nothing more can arrive
            if count:
                unread[topic] = count
        return unread

    def deleted(self) -> tuple[Deleted, ...]:
        """The current topic's records deleted before the query read them (`retention`)."""
        committed = self.committed()
        if not committed:
            return ()
        return deleted(self.current.topic, committed, self._offsets.log_range(self.current.topic))

    def committed(self) -> Offsets:
        """Where the newest committed batch left the current topic ({} before any)."""
        return self._committed()

    def _committed(self) -> Offsets:
        return committed_offsets(self._checkpoint, self.current)

    def _load(self) -> InputSource | None:
        try:
            data = json.loads(Path(self._path).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SwitchRefused(f"cannot read the input record {self._path}: {exc}") from exc
        if data.get("query_id") != self._query_id:
            raise SwitchRefused(f"{self._path} is the input record of query "
                                f"{data.get('query_id')}, not {self._query_id}")
        return InputSource(
            data["topic"], data["generation"], _offsets(data["start"]),
            {t: _offsets(o) for t, o in data["retired"].items()})

    def _save(self) -> None:
        c = self.current
        write_json_atomically(self._path, {
            "format": FORMAT_VERSION, "query_id": self._query_id, "topic": c.topic,
            "generation": c.generation, "start": {str(p): o for p, o in c.start.items()},
            "retired": {t: {str(p): o for p, o in o_.items()} for t, o_ in c.retired.items()}})


def _offsets(raw: dict[str, int]) -> dict[int, int]:
    return {int(p): int(o) for p, o in raw.items()}


def _text(offsets: Offsets) -> str:
    return "{" + ", ".join(f"{p}: {o}" for p, o in sorted(offsets.items())) + "}"


def entry_sources(checkpoint_dir: str, batch_id: int) -> dict[str | None, dict[str, Offsets]]:
    """An offset-log entry's sources: name (None when unnamed) → topic → offsets.

    An entry is a version line (`v1`; `v2` with named sources), a metadata line, then one
    line per source: its offset JSON (`v1`) or `<name>:<offset JSON>` (`v2`); `-` for none.
    """
    lines = (local_path(checkpoint_dir) / "offsets" / str(batch_id)).read_text().splitlines()
    sources: dict[str | None, dict[str, Offsets]] = {}
    for line in lines[2:]:
        name, raw = line.split(":", 1) if lines[0] == "v2" else (None, line)
        if raw.strip() in ("", "-"):
            continue
        sources[name] = {topic: _offsets(parts) for topic, parts in json.loads(raw).items()}
    return sources


def checkpoint_input(checkpoint_dir: str) -> CheckpointInput | None:
    """The source of the newest planned batch (None: a new checkpoint)."""
    planned = read_batches(checkpoint_dir).last_planned
    if planned is None:
        return None
    sources = entry_sources(checkpoint_dir, planned)
    if len(sources) != 1 or len(next(iter(sources.values()))) != 1:
        raise SwitchRefused(f"batch {planned} of {checkpoint_dir} reads {sources}; the runtime "
                            "expects one source of one topic")
    (name, topics), = sources.items()
    return CheckpointInput(generation_of(name), next(iter(topics)))


def committed_offsets(checkpoint_dir: str, source: InputSource) -> Offsets:
    """Where the newest committed batch left `source`'s topic ({} if it never committed)."""
    committed = read_batches(checkpoint_dir).last_committed
    if committed is None:
        return {}
    topics = entry_sources(checkpoint_dir, committed).get(source.name, {})
    return topics.get(source.topic, {})
