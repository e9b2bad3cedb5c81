"""The one error of the wire contract: a payload that is not the record its reader expects.

Owns `DecodeError`, which carries the record's topic, partition and offset when the caller
knows them, so garbage on a topic is counted and logged (or dead-lettered) with its position
instead of crashing a process. Its `reason` is a sentence in words, never a library's repr.
"""

from __future__ import annotations


class DecodeError(ValueError):
    """A payload that is not a valid record of the expected type."""

    def __init__(
        self,
        reason: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = [
            f"{name}={value}"
            for name, value in (("topic", self.topic), ("partition", self.partition),
                                ("offset", self.offset))
            if value is not None
        ]
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def at(self, *, topic: str | None, partition: int | None, offset: int | None) -> DecodeError:
        """The same error with the record's position filled in by a caller that knows it."""
        return DecodeError(self.reason, topic=topic, partition=partition, offset=offset)
