"""The checkpoints hot instances leave behind, and the lock that says an instance still runs.

With `standby = hot` each instance keeps its own checkpoint beside the query's
(`<checkpoint>.instance-<instance id>`, `instances`), a full copy of the state. An instance that
is gone for good (a restart under a new id, by default `<host>-<pid>`; a machine retired) would
leave its copy on disk for ever. So every hot instance holds an exclusive lock beside its
checkpoint for as long as its process lives (`InstanceLock`; the kernel drops it when the
process dies, `kill -9` included), and the active instance, once its query has started,
removes the checkpoints of instances whose lock nobody holds (`remove_left_behind`). Never
removed: its own, one a live process holds (a standby, or a frozen former active), and the one
the output's last batch came from. Only local checkpoints, as everywhere in the runtime.
Neighbours: `instances` (the naming, `query_dirs`), `query.lifecycle` (removes after a start),
`job` (holds the lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from streaming_jobs.config import INPUT_RECORD_SUFFIX, INSTANCE_INFIX
from streaming_jobs.errors import UserError
from streaming_jobs.runtime.checkpoint.instances import PREVIOUS_SUFFIX, checkpoint_id, staging_of
from streaming_jobs.runtime.checkpoint.state_repartition import local_path

log = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
"""`<instance checkpoint>.lock`: held by the process that runs the instance."""
WAIT_S = 30.0
"""How long a starting instance waits for its lock: longer than an active takes to remove a
left-behind copy of the state."""


class InstanceRunning(UserError):
    """Another live process holds this instance's lock: two processes under one instance id
    would write one checkpoint."""


class InstanceLock:
    """The instance's lock, held from `acquire` until `release` or the process's end."""

    def __init__(self, checkpoint_dir: str) -> None:
        self.path = lock_path(checkpoint_dir)
        self._fd: int | None = None

    def acquire(self, wait_s: float = WAIT_S) -> None:
        """Take the lock, or raise `InstanceRunning` naming the instance when a live process
        still holds it after `wait_s` (an active removing a copy holds it for moments)."""
        deadline = time.monotonic() + wait_s
        fd = _locked(self.path)
        while fd is None and time.monotonic() < deadline:
            time.sleep(0.2)
            fd = _locked(self.path)
        if fd is None:
            raise InstanceRunning(
                f"another running process holds {self.path}: it runs this instance "
                f"({Path(str(self.path)[:-len(LOCK_SUFFIX)]).name}); give each process an "
                "instance id of its own (--instance-id)")
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_path(checkpoint_dir: str) -> Path:
    return Path(str(local_path(checkpoint_dir.rstrip("/"))) + LOCK_SUFFIX)


def remove_left_behind(query_dir: str, own: str, output_checkpoint_id: str | None) -> list[str]:
    """Remove the instance checkpoints beside `query_dir` that no live process holds, but
    `own` and the one whose id is `output_checkpoint_id` (the output's last batch's); returns
    what it removed. Each is removed under its lock, so an instance starting meanwhile waits
    for it and then makes its copy afresh."""
    mine = local_path(own.rstrip("/"))
    removed = []
    for checkpoint in _instance_checkpoints(query_dir):
        if checkpoint == mine or _holds_output(checkpoint, output_checkpoint_id):
            continue
        with _lock_of_gone(checkpoint) as gone:
            if gone:
                for path in _files_of(checkpoint):
                    _remove(path)
                removed.append(str(checkpoint))
    if removed:
        log.info("removed the checkpoints of instances no longer running: %s",
                 ", ".join(removed))
    return removed


def _instance_checkpoints(query_dir: str) -> list[Path]:
    """Every instance's checkpoint beside the query's, as named (not its set-aside copy, input
    record or lock)."""
    base = local_path(query_dir.rstrip("/"))
    extras = (PREVIOUS_SUFFIX, INPUT_RECORD_SUFFIX, LOCK_SUFFIX)
    named = {p if not p.name.endswith(extras) else _strip(p, extras)
             for p in base.parent.glob(f"{base.name}{INSTANCE_INFIX}*")}
    return sorted(named)


def _strip(path: Path, extras: tuple[str, ...]) -> Path:
    for extra in extras:
        if path.name.endswith(extra):
            return _strip(path.with_name(path.name[:-len(extra)]), extras)
    return path


def _holds_output(checkpoint: Path, output_checkpoint_id: str | None) -> bool:
    """Whether the checkpoint or the one it set aside wrote the output's last batch."""
    return output_checkpoint_id is not None and output_checkpoint_id in (
        checkpoint_id(str(checkpoint)),
        checkpoint_id(str(checkpoint) + PREVIOUS_SUFFIX))


def _files_of(checkpoint: Path) -> list[Path]:
    """The checkpoint, its input record, the one it set aside and a copy it was making."""
    previous = Path(str(checkpoint) + PREVIOUS_SUFFIX)
    return [checkpoint, Path(str(checkpoint) + INPUT_RECORD_SUFFIX), previous,
            Path(str(previous) + INPUT_RECORD_SUFFIX), staging_of(checkpoint)]


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _lock_of_gone(checkpoint: Path) -> Iterator[bool]:
    """True, holding the instance's lock, when no process held it; the lock file goes with
    the checkpoint (one who opened it meanwhile finds it unlinked and opens it again)."""
    path = Path(str(checkpoint) + LOCK_SUFFIX)
    fd = _locked(path)
    if fd is None:
        yield False
        return
    try:
        yield True
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _locked(path: Path) -> int | None:
    """An open descriptor holding the exclusive lock of `path` (created if missing), or None
    when another holds it. The file is checked to still be the one locked: a remover unlinks it
    under the lock, and a lock on an unlinked file would guard nothing."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
