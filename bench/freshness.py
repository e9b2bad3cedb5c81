"""Whether each result under `bench/results/` still measures the code as it is.

Owns the verdict: a result is stale when a commit that touched the code it measures
(`bench.catalog`) is not in the history of a commit it was measured at (`commit` in the
result, `bench.record`, and in each row a run kept from an earlier one), or when it names no
commit or was measured on uncommitted changes.
`python -m bench.report --stale` prints the list and exits 1 when it is not empty.
Neighbours: `bench.report` (the command), git (the history).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.catalog import BENCHMARKS
from bench.record import RESULTS_DIR, ROOT

MEASURES: Mapping[str, tuple[str, ...]] = {b.name: b.measures for b in BENCHMARKS}
"""What each benchmark's figures depend on (`bench.catalog`)."""


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


def verdict(name: str, measured: str, root: Path = ROOT,
            uncommitted: Sequence[str] | None = None) -> Stale | None:
    """Why the result of `name` measured at commit `measured` is stale, or None. A result
    measured with uncommitted changes (`+dirty`) counts as measured at its commit when the
    changed files it names (`uncommitted`) are none of the code it measures."""
    if not measured:
        return Stale(name, "names no commit: measured before results recorded one")
    if measured.endswith("+dirty"):
        if uncommitted is None:
            return Stale(name, f"measured on uncommitted changes over {measured}")
        touched = [p for p in uncommitted if _under(p, MEASURES[name])]
        if touched:
            return Stale(name, f"measured on uncommitted changes over {measured}: "
                               f"{', '.join(touched)}")
        measured = measured.removesuffix("+dirty")
    changed = last_change(MEASURES[name], root)
    if changed and _git("merge-base", "--is-ancestor", changed, measured,
                        root=root).returncode != 0:
        touched = _git("diff", "--name-only", measured, changed, "--", *MEASURES[name],
                       root=root).stdout.split()
        if touched:  # none: the code it measures is as it was (a change reverted)
            return Stale(name, f"measured at {measured}; changed since: {', '.join(touched)}")
    return None


def _under(path: str, measured: Sequence[str]) -> bool:
    return any(path == m or path.startswith(f"{m.rstrip('/')}/") for m in measured)


def stale(results_dir: Path = RESULTS_DIR, root: Path = ROOT) -> list[Stale]:
    """Every result that no longer measures the code as it is, and every benchmark that has
    no result at all."""
    found = []
    for name in sorted(MEASURES):
        path = results_dir / f"{name}.json"
        if not path.is_file():
            found.append(Stale(name, f"no result: run `python -m bench.{name}`"))
            continue
        result = json.loads(path.read_text())
        why = next((w for commit, uncommitted in _stamps(result).items()
                    if (w := verdict(name, commit, root, uncommitted)) is not None), None)
        if why is not None:
            found.append(why)
    return found


def _stamps(result: dict[str, Any]) -> dict[str, Sequence[str] | None]:
    """Each commit `result` was measured at (→ its uncommitted files): its own, and those of
    rows kept from earlier runs, which carry their own stamps (`bench.reaction`)."""
    rows = [row for value in result.values() if isinstance(value, list)
            for row in value if isinstance(row, dict) and "commit" in row]
    return {str(result.get("commit", "")): result.get("uncommitted"),
            **{str(row["commit"]): row.get("uncommitted") for row in rows}}
