"""Recorded metrics traces: the JSON-lines file format `controller record` writes and
`controller replay` reads.

Owns the file layout, one JSON object per line:

- a header `{"header": {"format": "streamctl-metrics-trace", "version": 1, "topic": …,
  "from_ms": …, "notes": {…}}}` (what was recorded, and free-form notes such as the load
  profile of a test trace);
- one line per record, `{"timestamp_ms": <Kafka timestamp>, "partition": …, "offset": …,
  "metrics": <TaskMetrics.to_avro()>}`;
- a footer `{"footer": {"to_ms": …, "records": …, "bad_records": [...]}}`, so a replay knows
  how long the recording went on after the last record (a lost instance is a silence).

Reading is forgiving the same way the Kafka sources are: a line that is not a valid record is
counted as a `BadRecord` with its line number and skipped, never raised. Header and footer are
optional, so a hand-written file of record lines is a trace too. Neighbours: `kafka.traces`
(reads the metrics topic into entries), `replay` (drives the loop over a `Trace`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from schemas import TaskMetrics

FORMAT = "streamctl-metrics-trace"
VERSION = 1


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One metrics record and when the broker got it (what the controller would have seen)."""

    timestamp_ms: int
    metrics: TaskMetrics
    partition: int = 0
    offset: int = -1


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record (or file line) that did not decode, and where it was."""

    where: str
    reason: str


@dataclass(frozen=True, slots=True)
class Trace:
    entries: tuple[TraceEntry, ...]
    topic: str = ""
    from_ms: int | None = None
    """Start of the recording; may be earlier than the first record."""
    to_ms: int | None = None
    """End of the recording; may be later than the last record."""
    notes: Mapping[str, Any] = field(default_factory=dict)
    bad_records: tuple[BadRecord, ...] = ()

    @property
    def start_ms(self) -> int:
        first = self.entries[0].timestamp_ms if self.entries else 0
        return first if self.from_ms is None else min(self.from_ms, first or self.from_ms)

    @property
    def end_ms(self) -> int:
        last = self.entries[-1].timestamp_ms if self.entries else self.start_ms
        return last if self.to_ms is None else max(self.to_ms, last)


class TraceWriter:
    """Writes a trace as it is recorded: header first, one line per record, footer on close."""

    def __init__(self, out: IO[str], *, topic: str, from_ms: int,
                 notes: Mapping[str, Any] | None = None) -> None:
        self._out = out
        self.records = 0
        self.bad_records: list[BadRecord] = []
        self._line({"header": {"format": FORMAT, "version": VERSION, "topic": topic,
                               "from_ms": from_ms, "notes": dict(notes or {})}})
        # Out at once: whoever watches the file sees the recording has begun, and from when.
        self._out.flush()

    def write(self, entry: TraceEntry) -> None:
        self._line({"timestamp_ms": entry.timestamp_ms, "partition": entry.partition,
                    "offset": entry.offset, "metrics": entry.metrics.to_avro()})
        self.records += 1

    def bad(self, record: BadRecord) -> None:
        self.bad_records.append(record)

    def close(self, to_ms: int) -> None:
        self._line({"footer": {"to_ms": to_ms, "records": self.records,
                               "bad_records": [{"where": b.where, "reason": b.reason}
                                               for b in self.bad_records]}})
        self._out.flush()

    def _line(self, obj: Mapping[str, Any]) -> None:
        self._out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def read_trace(path: Path) -> Trace:
    with path.open() as lines:
        return parse_trace(lines, source=str(path))


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> Trace:
    """Entries sorted by timestamp; bad lines become `BadRecord`s, not errors."""
    entries: list[TraceEntry] = []
    bad: list[BadRecord] = []
    header: dict[str, Any] = {}
    footer: dict[str, Any] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if "header" in obj:
                header = obj["header"]
            elif "footer" in obj:
                footer = obj["footer"]
                bad += [BadRecord(b["where"], b["reason"]) for b in footer.get("bad_records", [])]
            else:
                entries.append(_entry(obj))
        except (ValueError, KeyError, TypeError) as exc:
            bad.append(BadRecord(f"{source} line {number}", f"not a trace record: {exc!r}"))
    entries.sort(key=lambda e: e.timestamp_ms)
    return Trace(tuple(entries), topic=header.get("topic", ""), from_ms=header.get("from_ms"),
                 to_ms=footer.get("to_ms"), notes=header.get("notes", {}),
                 bad_records=tuple(bad))


def _entry(obj: Mapping[str, Any]) -> TraceEntry:
    metrics = TaskMetrics.from_avro(dict(obj["metrics"]))
    stamp = obj.get("timestamp_ms")
    return TraceEntry(int(stamp) if stamp is not None else metrics.batch_end_ms, metrics,
                      int(obj.get("partition", 0)), int(obj.get("offset", -1)))
