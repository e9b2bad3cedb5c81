"""Knobs a running query reads per batch, so that changing them needs no restart: the shed
fraction and the version of the job's swappable function.

The driver puts the values in force on the thread that runs each batch (a Spark local
property, set by the sink before the batch executes); every task of the batch's jobs carries
it (`TaskContext.getLocalProperty`) and reads it here. A value changed while the gate holds
new batches is therefore in force from the next batch on. Where there is no batch (a task of
a run outside the sink: the standby's warm-up, `job check`; or the driver), the values the
plan was built with apply.

A replayed batch reads the values in force when it runs again. That cannot change what was
committed: a change waits for every admitted batch to commit, and a batch whose output is
already committed is not written again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pickled into Spark tasks with the job's function: no project imports
    from streaming_jobs.runtime.desired.state import DesiredState

PROPERTY = "streamctl.per_batch"
"""The Spark local property carrying the values in force for a batch (JSON)."""


@dataclass(frozen=True)
class BatchValues:
    """The values a batch runs with."""

    shed_fraction: float = 0.0
    udf_version: str = ""

    @classmethod
    def of(cls, desired: DesiredState) -> BatchValues:
        """The per-batch knobs of a desired state."""
        return cls(desired.shed_fraction, desired.udf_version)

    def encode(self) -> str:
        return json.dumps({"shed_fraction": self.shed_fraction,
                           "udf_version": self.udf_version}, sort_keys=True)


@lru_cache(maxsize=16)
def decode(text: str) -> BatchValues:
    """The values `encode` wrote (cached: a task reads the same text for every record)."""
    fields = json.loads(text)
    return BatchValues(float(fields["shed_fraction"]), str(fields["udf_version"]))


def in_force(built_with: BatchValues) -> BatchValues:
    """In a task of a batch: the values the driver set for it; anywhere else `built_with`."""
    from pyspark import TaskContext

    context = TaskContext.get()
    text = context.getLocalProperty(PROPERTY) if context is not None else None
    return decode(text) if text else built_with


class SwappableFunction:
    """The job's function as its builder receives it (`JobContext.function`): each call goes
    to the version in force for the batch it runs in, so a `udf_version` change needs no
    restart. Pickled with the Spark functions that call it."""

    def __init__(self, versions: Mapping[str, Callable[..., Any]], built_with: str) -> None:
        self._versions = dict(versions)
        self._built_with = BatchValues(udf_version=built_with)

    @property
    def version(self) -> str:
        """The version in force where it is read: in a task, the batch's; else the one the
        plan was built with. Read it per call (or per batch), not once in the builder."""
        return in_force(self._built_with).udf_version or self._built_with.udf_version

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        version = self.version
        function = self._versions.get(version)
        if function is None:  # validated before a tuple is applied; a bug if it happens
            raise LookupError(f"function version {version!r} is not one of "
                              f"{', '.join(self._versions)}")
        return function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"SwappableFunction({', '.join(self._versions)}; built with " \
               f"{self._built_with.udf_version})"
