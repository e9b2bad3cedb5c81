"""Files beside a checkpoint (the desired state, the input source, the job's identity),
written so that a crash leaves the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_atomically(path: str, data: object) -> None:
    """A temporary file, fsync, rename over the old one: a crash leaves the old or the new.
    The temporary file is per process, since the instances of a query share the directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with temporary.open("w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, target)
