"""The desired state on disk and on the wire: persisted beside the checkpoint, published.

Owns the JSON file a restarted job process resumes from (written atomically after every
applied tuple: fail-static, the last applied configuration and epoch survive a crash), its
validation against today's bounds when read back, and the conversion to the Avro
`DesiredState` record published to the compacted state topic. Neighbours: `parameters` (the
type and the registry), `job` (calls save/load/publish).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, fields, replace
from pathlib import Path

from schemas.records import DesiredStateRecord
from streaming_jobs.runtime.parameters import (
    REGISTRY,
    TOPIC_PARAMETERS,
    BadValue,
    DesiredState,
    Limits,
    is_request,
    with_value,
)

log = logging.getLogger(__name__)
FORMAT_VERSION = 1


class DesiredStateFileError(RuntimeError):
    """The persisted state cannot be read; the message names the file."""


def save(path: str, query_id: str, state: DesiredState) -> None:
    write_json_atomically(path, {"format": FORMAT_VERSION, "query_id": query_id,
                                 **asdict(state)})


def write_json_atomically(path: str, data: object) -> None:
    """A temporary file, fsync, rename over the old one: a crash leaves the old or the new."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp")
    with temporary.open("w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, target)


def load(path: str, query_id: str, defaults: DesiredState,
         limits: Limits) -> DesiredState | None:
    """The persisted state (None when there is none), each value checked against `limits`.

    A value out of today's bounds (say task_slots shrank) falls back to its start-up default
    with a warning, keeping the epoch: the job still starts, and says what it changed.
    """
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DesiredStateFileError(f"cannot read the desired state {path}: {exc}; delete "
                                    "it to start from the configured values") from exc
    if not isinstance(data, dict) or data.get("query_id") != query_id:
        raise DesiredStateFileError(f"{path} holds the desired state of query "
                                    f"{data.get('query_id') if isinstance(data, dict) else '?'}"
                                    f", not {query_id}")
    state = replace(defaults, epoch=int(data.get("epoch", 0)))
    for f in fields(DesiredState):
        if f.name == "epoch" or f.name not in data:
            continue
        state = _restored(state, f.name, data[f.name], limits, path)
    return state


def _restored(state: DesiredState, name: str, raw: object, limits: Limits,
              path: str) -> DesiredState:
    parameter = REGISTRY.get(name)
    if parameter is None or parameter.availability(limits) is not None:
        return state  # not changeable here: the configured value stands
    if not is_request(name, raw):
        return state  # nothing was requested: the configured value stands
    text = str(raw)
    if name in TOPIC_PARAMETERS:  # it existed when applied; a missing topic shows on start
        limits = replace(limits, existing_topics=frozenset({text}))
    try:
        return with_value(state, name, parameter.parse(text, limits))
    except BadValue as exc:
        log.warning("%s: %s=%r is out of today's bounds (%s); using the configured %s",
                    path, name, raw, exc, state.value(name))
        return state


def to_record(state: DesiredState, *, query_id: str, instance_id: str, control_id: str | None,
              at_ms: int) -> DesiredStateRecord:
    return DesiredStateRecord(
        query_id=query_id, instance_id=instance_id, epoch=state.epoch, control_id=control_id,
        updated_at_ms=at_ms, input_parallelism=state.input_parallelism,
        state_partitions=state.state_partitions,
        max_offsets_per_trigger=state.max_offsets_per_trigger,
        shed_fraction=state.shed_fraction, udf_version=state.udf_version,
        input_topic=state.input_topic, output_topic=state.output_topic,
        executors=state.executors)
