"""Where a benchmark's results go: `bench/results/<name>.json`, stamped with when, on what and
by which command they were measured, so the tables `bench.report` renders from them say so.

Owns the stamp (`measured_at`, `command`, `commit`: the code measured, `+dirty` when it had
uncommitted changes, named in `uncommitted`; `machine`: architecture, cores, memory, Python,
the 1-minute load average before and after, the reference loop's time) and the file.
Neighbours: every `bench.*` command writes through `write`; `bench.report` reads the files
back.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).with_name("results")


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def machine(load_before: float) -> dict[str, Any]:
    """What the figures were measured on; the load averages say how busy it was, the
    reference loop how fast it was that day."""
    return {"arch": platform.machine(), "cpus": os.cpu_count(), "memory_gib": _memory_gib(),
            "python": platform.python_version(), "load_average_1m_before": load_before,
            "load_average_1m_after": load_average(),
            "reference_loop_ms": reference_loop_ms()}


REFERENCE_LOOP = 2_000_000
"""Additions in the reference loop: a fifth of a second or so of one core."""


def reference_loop_ms() -> float:
    """Milliseconds of a fixed pure-Python loop, the best of three. A virtual machine of the
    same cores and memory runs at different speeds on different days (its host's clock, its
    neighbours): a rough guide when CPU-bound figures (the controller's) from different days
    are compared. Figures bound by timers, the JVM or I/O move less with it."""
    best = float("inf")
    for _ in range(3):
        started, total = time.perf_counter(), 0
        for i in range(REFERENCE_LOOP):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def stamp(name: str, argv: list[str] | None = None) -> dict[str, Any]:
    """When, and by which command (`python -m bench.<name>` and `argv`, default this
    process's arguments), figures are measured now."""
    command = " ".join([f"python -m bench.{name}", *(sys.argv[1:] if argv is None else argv)])
    return {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": command, "commit": commit(), "uncommitted": uncommitted()}


ROOT = RESULTS_DIR.parent.parent


def _git(*args: str, root: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=root, text=True, capture_output=True,
                          timeout=30).stdout.strip()


def commit() -> str:
    """The checked-out commit, `+dirty` when tracked files differ from it; empty outside git."""
    try:
        head = _git("rev-parse", "--short=12", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{head}+dirty" if head and uncommitted() else head


def uncommitted(root: Path = ROOT) -> list[str]:
    """The tracked files that differ from the checked-out commit, staged or not (paths from
    the root)."""
    try:
        return sorted(_git("diff", "--name-only", "HEAD", root=root).splitlines())
    except (OSError, subprocess.SubprocessError):
        return []


def write(name: str, payload: dict[str, Any], load_before: float,
          argv: list[str] | None = None) -> Path:
    """`payload` stamped and written to `bench/results/<name>.json`; the path."""
    stamped = {**stamp(name, argv), "machine": machine(load_before), **payload}
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(stamped, indent=2) + "\n")
    print(f"written to {path}; `python -m bench.report --write` renders docs/benchmarks.md")
    return path


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None
