"""Whether each result under `bench/results/` still measures the code as it is.

Owns `MEASURES` (each benchmark → the packages and modules its figures depend on) and the
verdict: a result is stale when a commit that touched that code is not in the history of the
commit it was measured at (`commit` in the result, `bench.record`), or when it names no commit
or was measured on uncommitted changes. `python -m bench.report --stale` prints the list and
exits 1 when it is not empty. Neighbours: `bench.report` (the command), git (the history).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.record import RESULTS_DIR

ROOT = RESULTS_DIR.parent.parent

_CONTROLLER = ("controller", "schemas")
_RUNTIME = ("streaming_jobs/runtime", "streaming_jobs/api.py", "streaming_jobs/config.py",
            "schemas")

MEASURES: Mapping[str, tuple[str, ...]] = {
    "fleet": (*_CONTROLLER, "bench/fleet.py"),
    "sim": (*_CONTROLLER, "bench/sim"),
    "reaction": (*_CONTROLLER, *_RUNTIME, "streaming_jobs/jobs", "bench/reaction.py"),
    "failover": (*_CONTROLLER, *_RUNTIME, "bench/failover.py"),
    "pauses": (*_RUNTIME, "bench/pauses.py"),
    "restart": (*_RUNTIME, "bench/restart.py"),
    "throughput": (*_RUNTIME, "streaming_jobs/jobs", "bench/throughput.py", "bench/bed.py"),
    "fraud_partitions": (*_RUNTIME, "streaming_jobs/jobs", "bench/fraud_partitions.py",
                         "bench/bed.py"),
    "state_repartition": (*_RUNTIME, "bench/state_repartition.py"),
    "sink": ("streaming_jobs/runtime/sink", "bench/sink.py"),
    "overhead": (*_RUNTIME, "bench/overhead.py"),
}
"""What each benchmark's figures depend on (paths from the repository's root)."""


@dataclass(frozen=True)
class Stale:
    name: str
    why: str


def _git(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, text=True, capture_output=True,
                          timeout=60)


def last_change(paths: Sequence[str], root: Path = ROOT) -> str:
    """The newest commit that touched any of `paths`."""
    return _git("log", "-1", "--format=%H", "--", *paths, root=root).stdout.strip()


def verdict(name: str, measured: str, root: Path = ROOT) -> Stale | None:
    """Why the result of `name` measured at commit `measured` is stale, or None."""
    if not measured:
        return Stale(name, "names no commit: measured before results recorded one")
    if measured.endswith("+dirty"):
        return Stale(name, f"measured on uncommitted changes over {measured}")
    changed = last_change(MEASURES[name], root)
    if changed and _git("merge-base", "--is-ancestor", changed, measured,
                        root=root).returncode != 0:
        return Stale(name, f"measured at {measured}; {changed[:12]} changed "
                           f"{', '.join(MEASURES[name])} since")
    return None


def stale(results_dir: Path = RESULTS_DIR, root: Path = ROOT) -> list[Stale]:
    """Every result that no longer measures the code as it is, and every benchmark that has
    no result at all."""
    found = []
    for name in sorted(MEASURES):
        path = results_dir / f"{name}.json"
        if not path.is_file():
            found.append(Stale(name, f"no result: run `python -m bench.{name}`"))
            continue
        why = verdict(name, str(json.loads(path.read_text()).get("commit", "")), root)
        if why is not None:
            found.append(why)
    return found
