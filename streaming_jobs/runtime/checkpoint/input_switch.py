"""Switching a query's input topic with exact offsets: the pure decisions.

Spark cannot change the topics a Kafka source subscribes to under its checkpoint (the old
topic's partitions count as deleted and `failOnDataLoss` fails the query; without it the new
topic starts wherever the source finds it). What it can do, since 4.2, is replace a *named*
source by another one (`DataStreamReader.name` with source evolution): the old one is dropped,
the new one starts at offsets we give it, the stateful operators keep their state.

The contract with the user: producers move from the old topic A to the new topic B, then the
tuple `input_topic=B` is sent. The job keeps reading A until it is drained (every record of A
in a committed batch, and A's end offsets still for a quiet period), stops at that batch
boundary, checks A is still drained at the checkpoint's committed offsets (the cut), and
restarts with B from where B's records begin: offset 0 of every partition for a topic this
query never read (B must still hold its first records), or the offsets where the job left
it for a topic it read before (switching back). Every record of A is read before any of B, so
per-key order survives. Neighbours: `input_source` (the effects: checkpoint, Kafka, files),
`lifecycle` (switches at `start`), `owner.Reconfigurer` (drains before quiescing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from streaming_jobs.errors import RequestRefused

Offsets = Mapping[int, int]
"""Partition → offset (the next record to read)."""
LogRange = Mapping[int, tuple[int, int]]
"""Partition → (log start offset, log end offset) of a topic, as the broker reports them."""


class SwitchRefused(RequestRefused):
    """The switch cannot be exact here; nothing was changed. The message says why."""



@dataclass(frozen=True)
class KafkaInput:
    """The source of one run of a query."""

    topic: str
    name: str | None = None
    """The source's name in the checkpoint (Spark's `DataStreamReader.name`, needs
    `spark.sql.streaming.queryEvolution.enableSourceEvolution`); None: an unnamed source, as
    in checkpoints written before the runtime named its sources."""
    starting_offsets: str = "earliest"
    """Where the source starts when the checkpoint does not know it yet: 'earliest', or
    Spark's JSON of every partition's offset (an input switch). Ignored once the checkpoint
    has the source: its offsets there win."""
    fail_on_data_loss: bool = True
    """Spark's `failOnDataLoss`: a record deleted before the run read it fails the run. Off
    only for the run after such a loss was found and reported (`retention`, `skip`)."""


@dataclass(frozen=True)
class InputSource:
    """The query's input as its checkpoint knows it, and every topic it has left."""

    topic: str
    generation: int | None
    """Counts the switches; the source is named `input_<generation>`. None: an unnamed source
    (a checkpoint from before named sources), which cannot be switched."""
    start: Offsets = field(default_factory=dict)
    """Where the source starts if the checkpoint does not know it yet (empty: earliest)."""
    retired: Mapping[str, Offsets] = field(default_factory=dict)
    """Topic → the offsets where the job stopped reading it (all read before them)."""

    @property
    def name(self) -> str | None:
        return None if self.generation is None else source_name(self.generation)

    def kafka_input(self) -> KafkaInput:
        offsets = (json.dumps({self.topic: {str(p): o for p, o in sorted(self.start.items())}})
                   if self.start else "earliest")
        return KafkaInput(self.topic, self.name, offsets)

    def switched(self, topic: str, start: Offsets, left_at: Offsets) -> InputSource:
        """The next generation, reading `topic` from `start`; this topic retired at `left_at`."""
        assert self.generation is not None, "an unnamed source cannot be switched"
        retired = {t: o for t, o in self.retired.items() if t != topic}
        return InputSource(topic, self.generation + 1, dict(start),
                           {**retired, self.topic: dict(left_at)})


def source_name(generation: int) -> str:
    return f"input_{generation}"


def generation_of(name: str | None) -> int | None:
    """`input_3` → 3; None (unnamed) → None. Other names are not this runtime's."""
    if name is None:
        return None
    prefix, _, number = name.rpartition("_")
    if prefix != "input" or not number.isdigit():
        raise ValueError(f"source name {name!r} is not input_<n>")
    return int(number)


def backlog(committed: Offsets, log: LogRange) -> int:
    """Records of the topic not in a committed batch (a partition never read starts at its
    log start)."""
    return sum(max(0, high - committed.get(p, low)) for p, (low, high) in log.items())


@dataclass(frozen=True)
class DrainSample:
    """What the job saw at one moment while draining the old topic."""

    at_s: float
    committed: Offsets
    """The offsets the last committed batch ended at (the checkpoint's)."""
    log: LogRange


@dataclass(frozen=True)
class Drained:
    pass


@dataclass(frozen=True)
class NotDrained:
    backlog: int
    """Records of the old topic not yet in a committed batch."""
    arrived: int
    """Records appended to the old topic during the last quiet period (producers still on
    it); 0 before a full quiet period was observed."""


def drain_state(samples: Sequence[DrainSample], quiet_s: float) -> Drained | NotDrained:
    """Drained when the newest sample has no backlog and the topic's end offsets have not
    moved for `quiet_s` (samples in time order)."""
    latest = samples[-1]
    since = [s for s in samples if s.at_s <= latest.at_s - quiet_s]
    reference = since[-1] if since else None
    arrived = (0 if reference is None else
               sum(latest.log[p][1] - reference.log.get(p, (0, 0))[1] for p in latest.log))
    left = backlog(latest.committed, latest.log)
    if left == 0 and reference is not None and arrived == 0:
        return Drained()
    return NotDrained(left, arrived)


def describe(verdict: NotDrained, topic: str, target: str, waited_s: float) -> str:
    """Why the switch did not happen, keyed to what the user does next."""
    if verdict.arrived:
        return (f"{topic} is still being written to ({verdict.arrived} records in the quiet "
                f"period, {verdict.backlog} unread after {waited_s:.0f} s): move its producers "
                f"to {target}, then send the tuple again")
    return (f"{topic} was not drained within {waited_s:.0f} s ({verdict.backlog} records not "
            f"yet in a committed batch): raise the batch cap or wait, then send it again")


def start_offsets(current: InputSource, target: str, log: LogRange,
                  output_topic: str) -> Offsets:
    """Where `target` must be read from so that nothing is lost or read twice.

    A topic this query never read holds only records produced since the producers moved, so
    it is read from offset 0 of every partition, which must still be there. A topic it left
    before is read from where it stopped (partitions added since from 0).
    """
    if current.generation is None:
        raise SwitchRefused("the checkpoint's source is unnamed (written before named sources)"
                            "; Spark can switch only a named source: start a new checkpoint")
    if target == output_topic:
        raise SwitchRefused(f"{target} is the job's own output topic")
    if not log:
        raise SwitchRefused(f"{target} has no partitions")
    left_at = current.retired.get(target, {})
    start = {p: left_at.get(p, 0) for p in log}
    lost = {p: low for p, (low, _high) in log.items() if low > start[p]}
    if lost:
        where = ", ".join(f"partition {p} starts at {low}, the job needs {start[p]}"
                          for p, low in sorted(lost.items()))
        raise SwitchRefused(f"records of {target} the job has not read were deleted ({where})")
    return start


def cut(current: InputSource, committed: Offsets, log: LogRange) -> None:
    """After the quiesce: raise unless every record of the old topic is in a committed batch
    (records that arrived between the drain and the stop would otherwise be skipped)."""
    left = backlog(committed, log)
    if left:
        raise SwitchRefused(f"{left} records arrived on {current.topic} during the switch; "
                            f"still reading it: move every producer first")


@dataclass(frozen=True)
class CheckpointInput:
    """The source recorded in a checkpoint's newest offset-log entry."""

    generation: int | None
    topic: str


def resume(checkpoint: CheckpointInput | None, persisted: InputSource | None,
           wanted: str) -> tuple[InputSource, str | None]:
    """The input a (re)starting process runs with, and a note when it is not `wanted`.

    The checkpoint is what Spark will resume; the persisted record (written before a switch
    restarts the query) says what a switch not yet planned in the checkpoint still needs.
    """
    if checkpoint is None:  # a new checkpoint: named from the start
        return InputSource(wanted, 0), None
    if checkpoint.generation is None:
        if checkpoint.topic != wanted:
            raise SwitchRefused(f"the checkpoint reads {checkpoint.topic}, not {wanted}, and its "
                                "unnamed source cannot be switched: start with that input topic")
        return InputSource(wanted, None), None
    if persisted is None:
        if checkpoint.topic != wanted:
            raise SwitchRefused(f"the checkpoint reads {checkpoint.topic}, not {wanted}, and no "
                                "input record says why: start with that input topic (a switch "
                                "is a control tuple)")
        return InputSource(wanted, checkpoint.generation), None
    if persisted.generation not in (checkpoint.generation, checkpoint.generation + 1):
        raise SwitchRefused(
            f"the checkpoint reads {checkpoint.topic} (source "
            f"{source_name(checkpoint.generation)}) but the input record says {persisted.topic} "
            f"(source {persisted.name}): it belongs to another checkpoint")
    if persisted.generation == checkpoint.generation and persisted.topic != checkpoint.topic:
        raise SwitchRefused(f"the checkpoint reads {checkpoint.topic} but the input record says "
                            f"{persisted.topic} for the same source")
    note = None if persisted.topic == wanted else (
        f"reading {persisted.topic}, as the checkpoint and its input record say, not {wanted}")
    return persisted, note
