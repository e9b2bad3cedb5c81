"""Dead letters and record sizes, the pure part: what fits in a topic, and how a record that
does not is still sent to the dead-letter topic.

Two kinds of record end on the dead-letter topic: an input record that does not decode (sent
from the Spark task that read it, `kafka.KafkaDeadLetterSink`) and an output row the sink
cannot write because of what it is — larger than the output topic takes, or without a key on
a compacted topic — sent in the batch's own transaction (`transactional_kafka`). Both carry
their origin and the reason in headers, and their size; one larger than the dead-letter
topic takes keeps as much of its payload as fits (`truncated` says so), so no record can stop
a job. Neighbours: `transactional_kafka` and `kafka` (the producers), `foreach_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Headers = list[tuple[str, str]]

RECORD_OVERHEAD_BYTES = 128
"""What a record costs on the wire beyond its key, value and headers: a record batch header
(61 bytes) holding it alone, and the record's own varints. A record counts this much more
than its bytes against a topic's `max.message.bytes`, so one that passes the check also fits
the batch the broker checks."""

DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
"""Kafka's default `max.message.bytes` of a topic (the broker's `message.max.bytes`)."""


@dataclass(frozen=True)
class TopicLimits:
    """What a topic accepts of one record, as its configuration says."""

    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """The topic's `max.message.bytes`: the largest record batch the broker appends."""
    compacted: bool = False
    """`cleanup.policy` includes `compact`: the broker refuses a record without a key."""


def record_bytes(key: bytes | None, value: bytes | None,
                 headers: Sequence[tuple[str, str]] = ()) -> int:
    """A record's size as checked against a limit: key, value, headers and the overhead."""
    return (len(key or b"") + len(value or b"") + RECORD_OVERHEAD_BYTES
            + sum(len(name) + len(text.encode()) for name, text in headers))


@dataclass(frozen=True)
class DeadLetter:
    """One record for the dead-letter topic, framed to fit it."""

    key: bytes | None
    value: bytes | None
    headers: Headers


def framed(key: bytes | None, payload: bytes | None, headers: Headers,
           limit_bytes: int) -> DeadLetter:
    """A dead letter of `payload` (and `key`) with `headers`, the payload's `size` among them,
    in at most `limit_bytes` (a record's whole size, `record_bytes`): as much of the payload
    as fits, and a `truncated` header saying how much was kept when it is not all; a key that
    alone leaves no room is dropped (`key_dropped` says its size)."""
    size = len(payload) if payload is not None else 0
    headers = [*headers, ("size", str(size))]
    if record_bytes(key, payload, headers) <= limit_bytes:
        return DeadLetter(key, payload, headers)
    note = "kept the first {} of " + f"{size} bytes"
    widest = [*headers, ("truncated", note.format(size))]
    if key is not None and record_bytes(key, None, widest) > limit_bytes:
        headers = [*headers, ("key_dropped", f"{len(key)} bytes")]
        key, widest = None, [*widest, headers[-1]]
    kept = max(0, limit_bytes - record_bytes(key, None, widest))
    return DeadLetter(key, payload[:kept] if payload is not None else None,
                      [*headers, ("truncated", note.format(kept))])


@dataclass(frozen=True)
class Rejected:
    """An output row the output topic cannot take: its index in the batch and why."""

    index: int
    reason: str


def screen(keys: Sequence[bytes | None], values: Sequence[bytes | None], topic: str,
           limits: TopicLimits, max_record_bytes: int) -> tuple[Rejected, ...]:
    """The rows of a batch that `topic` cannot take: over the smaller of the job's record
    limit and the topic's, or without a key where the topic is compacted."""
    limit = min(max_record_bytes, limits.max_message_bytes)
    rejected = []
    for index, (key, value) in enumerate(zip(keys, values, strict=True)):
        size = record_bytes(key, value)
        if size > limit:
            rejected.append(Rejected(index, too_large(size, topic, limit, limits,
                                                      max_record_bytes)))
        elif key is None and limits.compacted:
            rejected.append(Rejected(index, f"no key: {topic} is compacted "
                                            "(cleanup.policy=compact), which needs one"))
    return tuple(rejected)


def too_large(size: int, topic: str, limit: int, limits: TopicLimits,
              max_record_bytes: int) -> str:
    """Why a record of `size` bytes is not written to `topic`, naming the limit that holds."""
    which = (f"{topic}'s max.message.bytes {limits.max_message_bytes}"
             if limits.max_message_bytes <= max_record_bytes
             else f"the job's max_record_bytes {max_record_bytes}")
    return (f"record too large for {topic}: {size} bytes with overhead, over the limit {limit} "
            f"({which})")


@dataclass(frozen=True)
class Outgoing:
    """One record of a batch's transaction: an output row, or a row's dead letter."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    row: int
    """The row's index in the batch."""
    letter: bool


def outgoing(topic: str, keys: Sequence[bytes | None], values: Sequence[bytes | None],
             rejected: Sequence[Rejected], letters: LetterSpec) -> list[Outgoing]:
    """A batch's records: the rows `topic` takes, then a dead letter for each rejected one,
    its payload left out where the dead-letter topic refused it before (`letters.bare`)."""
    skip = {r.index for r in rejected}
    rows = [Outgoing(topic, key, value, [], index, False)
            for index, (key, value) in enumerate(zip(keys, values, strict=True))
            if index not in skip]
    dead = []
    for r in rejected:
        headers = [*letters.headers, ("output_topic", topic), ("error", r.reason)]
        payload = None if r.index in letters.bare else values[r.index]
        if r.index in letters.bare:
            headers.append(("payload", "left out: the dead-letter topic refused it"))
        letter = framed(keys[r.index], payload, headers, letters.limit_bytes)
        dead.append(Outgoing(letters.topic, letter.key, letter.value, letter.headers, r.index,
                             True))
    return rows + dead


@dataclass(frozen=True)
class LetterSpec:
    """Where a batch's dead letters go, what they say of it, and their size limit."""

    topic: str
    headers: Headers
    limit_bytes: int
    bare: frozenset[int] = frozenset()
    """Rows whose dead letter the topic refused: sent again without their payload."""


def limit_problems(max_record_bytes: int, topics: Sequence[tuple[str, str, TopicLimits]],
                   ) -> list[str]:
    """Why the job's record limit does not fit the topics it writes: (what, topic, limits) for
    each, e.g. ("output topic", "scores", …). A producer whose limit is above a topic's would
    put several records in a batch the broker refuses."""
    return [f"max_record_bytes {max_record_bytes} (--max-record-bytes, "
            f"STREAMCTL_MAX_RECORD_BYTES) is over the {what} {topic}'s max.message.bytes "
            f"{limits.max_message_bytes}: lower it, or raise the topic's limit "
            f"(streamctl stack kafka configs --entity-type topics --entity-name {topic} "
            f"--alter --add-config max.message.bytes={max_record_bytes})"
            for what, topic, limits in topics if max_record_bytes > limits.max_message_bytes]
