"""The desired state on disk and on the wire: persisted beside the checkpoint, published.

Owns the JSON file a restarted job process resumes from (written atomically after every
applied tuple: fail-static, the last applied configuration and epoch survive a crash), its
validation against today's bounds when read back, and the conversion to the Avro
`DesiredState` record published to the compacted state topic.

The file is shared by every instance of the query (it lives beside the shared checkpoint), and
its `active_instance` and epoch say who owns the query: a promoted standby writes it before it
starts the query, and an instance that finds another one named there at an epoch not below
its own is superseded (`superseded_by`): it must not write output, checkpoint or this file.
Writes never lower the epoch on disk (`StaleWrite`). Neighbours: `desired.state` (the type
and the registry), `job` and `standby` (call save/load/superseded_by).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from pathlib import Path

from schemas.records import DesiredStateRecord
from streaming_jobs.config import ConfigError, Identity
from streaming_jobs.errors import Fenced, UserError
from streaming_jobs.runtime.checkpoint.files import write_json_atomically
from streaming_jobs.runtime.desired.state import (
    REGISTRY,
    ROLE_PARAMETER,
    TOPIC_PARAMETERS,
    BadValue,
    DesiredState,
    Limits,
    is_request,
    start_problems,
    with_value,
)

log = logging.getLogger(__name__)
FORMAT_VERSION = 1


class DesiredStateFileError(UserError):
    """The persisted state cannot be read; the message names the file."""


class StaleWrite(Fenced):
    """The file holds a newer epoch than the state being saved: another instance owns it."""


def save(path: str, query_id: str, state: DesiredState) -> None:
    """Write atomically, never over a newer epoch: a former active that wakes up after a
    failover must not undo the promotion.

    The check and the rename are two steps; a process frozen exactly between them could still
    write an older epoch, which `superseded_by` then ignores (it compares epochs).
    """
    on_disk = read_owner(path, query_id)
    if on_disk is not None and on_disk[1] > state.epoch:
        raise StaleWrite(f"{path} holds epoch {on_disk[1]} (active instance "
                         f"{on_disk[0] or 'unnamed'}), newer than {state.epoch}; not "
                         "overwriting it")
    write_json_atomically(path, {"format": FORMAT_VERSION, "query_id": query_id,
                                 **asdict(state)})


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


def read_owner(path: str, query_id: str) -> tuple[str, int] | None:
    """(active_instance, epoch) on disk, or None when there is no file yet."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DesiredStateFileError(f"cannot read the desired state {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("query_id") != query_id:
        raise DesiredStateFileError(f"{path} does not hold the desired state of {query_id}")
    return str(data.get("active_instance", "")), int(data.get("epoch", 0))


def superseded_by(path: str, query_id: str, instance_id: str, epoch: int) -> str | None:
    """Why `instance_id`, running at `epoch`, no longer owns the query (None: it does).

    It is superseded when the shared file names another instance at an epoch not below its
    own: that instance was promoted after it. An older epoch naming another instance is a
    stale write, ignored. An unreadable file raises `DesiredStateFileError`: ownership cannot
    be confirmed, so the caller must not write.
    """
    owner = read_owner(path, query_id)
    if owner is None or owner[0] in ("", instance_id) or owner[1] < epoch:
        return None
    return (f"instance {owner[0]} was made active at epoch {owner[1]} (this instance runs "
            f"epoch {epoch})")


def _restored(state: DesiredState, name: str, raw: object, limits: Limits,
              path: str) -> DesiredState:
    parameter = REGISTRY.get(name)
    if parameter is None or parameter.unavailable(limits) is not None:
        return state  # not changeable here: the configured value stands
    if not is_request(name, raw):
        return state  # nothing was requested: the configured value stands
    text = str(raw)
    if name == ROLE_PARAMETER and not text:
        return state  # no failover yet: nobody named

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
    return DesiredStateRecord(query_id=query_id, instance_id=instance_id, control_id=control_id,
                              updated_at_ms=at_ms, **asdict(state))


class SharedDesiredState:
    """The query's desired state beside its (shared) checkpoint, and its publication.

    `initial` is what a starting process runs with (the file, else the configured values,
    which must be valid), `current` re-reads the file (a standby's view when it is promoted),
    `record` persists and publishes what the active instance applied, and `superseded` tells
    an instance whether another one owns the query now.
    """

    def __init__(self, identity: Identity, path: str, configured: DesiredState,
                 limits: Callable[[], Limits],
                 publish: Callable[[DesiredStateRecord], None]) -> None:
        self._query_id, self._instance_id = identity.query_id, identity.instance_id
        self._configured, self._limits, self._publish = configured, limits, publish
        self.path = path

    def configured(self) -> DesiredState:
        """The options' values, each checked by the registry against what the runtime knows
        (a bad one stops the job)."""
        problems = start_problems(self._configured, self._limits())
        if problems:
            raise ConfigError("; ".join(problems))
        return self._configured

    def initial(self) -> DesiredState:
        """The persisted desired state if there is one (fail-static), else the configured."""
        configured = self.configured()
        persisted = self.current(configured)
        if persisted is not configured:
            log.info("resuming the desired state of epoch %d from %s: %s", persisted.epoch,
                     self.path, configured.describe_change(persisted))
        return persisted

    def current(self, configured: DesiredState | None = None) -> DesiredState:
        """The file's state as of now (another instance may have written it), else the
        configured one (`configured` itself, unchanged)."""
        configured = configured or self._configured
        persisted = load(self.path, self._query_id, configured, self._limits())
        return configured if persisted is None else persisted

    def persist(self, state: DesiredState) -> None:
        """Write the file and nothing else; raises (OSError, `StaleWrite`) when it cannot: a
        promotion must not go on without the record that fences the former active."""
        save(self.path, self._query_id, state)

    def record(self, state: DesiredState, control_id: str | None) -> None:
        """Persist (so a restarted or promoted process resumes it), then publish. Raises
        `StaleWrite` when the file holds a newer epoch: this instance no longer owns it."""
        try:
            save(self.path, self._query_id, state)
        except OSError as exc:
            log.error("could not persist the desired state to %s (%s); a restarted process "
                      "would start from epoch %d's predecessor", self.path, exc, state.epoch)
        self._publish(to_record(state, query_id=self._query_id,
                                instance_id=self._instance_id,
                                control_id=control_id, at_ms=int(time.time() * 1000)))

    def superseded(self, epoch: int) -> str | None:
        """Why this instance, running at `epoch`, no longer owns the query (see
        `superseded_by`)."""
        return superseded_by(self.path, self._query_id, self._instance_id, epoch)
