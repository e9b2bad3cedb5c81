"""`bench.freshness`: a result is stale once a commit changes the code it measures."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from bench import freshness, record
from bench.catalog import BENCHMARKS, Benchmark

ROOT = Path(__file__).resolve().parents[3]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, text=True,
                          capture_output=True).stdout.strip()


def _commit(root: Path, path: str, text: str) -> str:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)
    _git(root, "add", path)
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", path)
    return _git(root, "rev-parse", "HEAD")


def test_a_result_goes_stale_when_its_measured_code_changes_or_was_uncommitted_and_not_otherwise(
        tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    measured = _commit(tmp_path, "streaming_jobs/runtime/sink/writer.py", "v1")
    results = tmp_path / "results"
    results.mkdir()
    for name in freshness.MEASURES:
        (results / f"{name}.json").write_text(json.dumps({"commit": measured}))

    _commit(tmp_path, "README.md", "unrelated")
    assert freshness.stale(results, tmp_path) == []

    _commit(tmp_path, "streaming_jobs/runtime/sink/writer.py", "v2")
    found = {s.name for s in freshness.stale(results, tmp_path)}
    assert "sink" in found and "fleet" not in found
    _commit(tmp_path, "streaming_jobs/runtime/sink/writer.py", "v1")  # reverted: as measured
    assert "sink" not in {s.name for s in freshness.stale(results, tmp_path)}
    _commit(tmp_path, "streaming_jobs/runtime/sink/writer.py", "v2")

    assert freshness.verdict("sink", measured + "+dirty", tmp_path) is not None
    # Uncommitted changes count only where they touch the measured code.
    assert freshness.verdict("fleet", measured + "+dirty", tmp_path, ["README.md"]) is None
    assert freshness.verdict("fleet", measured + "+dirty", tmp_path,
                             ["controller/core/model.py"]) is not None
    assert freshness.verdict("sink", "", tmp_path) is not None
    (results / "fleet.json").unlink()
    assert "fleet" in {s.name for s in freshness.stale(results, tmp_path)}


def test_every_measured_path_exists_and_every_result_is_named() -> None:
    """A misspelt path would leave its result fresh for ever."""
    missing = [p for paths in freshness.MEASURES.values() for p in paths
               if not (freshness.ROOT / p).exists()]
    assert not missing
    results = {p.stem for p in (freshness.ROOT / "bench" / "results").glob("*.json")}
    assert results <= set(freshness.MEASURES)


def test_the_uncommitted_files_are_named_whole_staged_or_not(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _commit(tmp_path, "controller/app.py", "v1")
    _commit(tmp_path, "README.md", "v1")
    assert record.uncommitted(tmp_path) == []
    (tmp_path / "controller/app.py").write_text("v2")  # the first line git would print
    (tmp_path / "README.md").write_text("v2")
    _git(tmp_path, "add", "README.md")
    assert record.uncommitted(tmp_path) == ["README.md", "controller/app.py"]



def test_a_result_goes_stale_when_a_row_it_kept_from_an_earlier_run_measured_older_code(
        tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    older = _commit(tmp_path, "bench/reaction.py", "v1")
    _commit(tmp_path, "bench/reaction.py", "v2")
    newer = _commit(tmp_path, "README.md", "unrelated")
    results = tmp_path / "results"
    results.mkdir()
    rows = [{"scenario": "step", "commit": newer}, {"scenario": "ramp", "commit": older}]
    (results / "reaction.json").write_text(json.dumps({"commit": newer, "summary": rows}))
    assert "reaction" in {s.name for s in freshness.stale(results, tmp_path)}
    (results / "reaction.json").write_text(json.dumps({"commit": newer, "summary": rows[:1]}))
    assert "reaction" not in {s.name for s in freshness.stale(results, tmp_path)}

RECORDING = {"bench/__init__.py", "bench/record.py", "bench/report.py", "bench/catalog.py",
             "bench/freshness.py"}
"""Modules that stamp, store and render results: they change no figure."""

LOAD_AND_WATCH = {"streamctl/loadgen.py", "streamctl/profiles.py", "streamctl/cards.py",
                  "streamctl/clicks.py", "streamctl/tail.py", "streamctl/view.py"}
"""Outside bench/, the modules that make a benchmark's load (its rate, its records) or read its
figures off the topics: a benchmark that runs one measures it. The rest of `streamctl` it
imports (ports, topic creation, process handling) changes no figure."""


def _module_file(module: str, run: bool = False) -> Path | None:
    """The file `module` is: a package's `__init__.py` when imported, its `__main__.py` when
    run (`python -m`)."""
    path = ROOT / module.replace(".", "/")
    package = (path / "__main__.py", path / "__init__.py") if run else (path / "__init__.py",)
    return next((c for c in (path.with_suffix(".py"), *package) if c.exists()), None)


def _runs(benchmark: Benchmark) -> set[str]:
    """The files under bench/ and `streamctl/` that `python -m bench.<name>` runs (its modules
    and the ones they import, transitively), recording modules left out."""
    start = _module_file(f"bench.{benchmark.name}", run=True)
    assert start is not None, benchmark.name
    seen: set[Path] = set()
    todo = [start, *_with_packages(f"bench.{benchmark.name}")]
    while todo:
        path = todo.pop()
        if path in seen or str(path.relative_to(ROOT)) in RECORDING:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.ImportFrom) and node.level), \
                f"{path}: a relative import, which this walk does not follow"
            names = ([node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                     if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            todo += [f for name in names if name.startswith(("bench.", "streamctl."))
                     for f in _with_packages(name)]
    return {str(p.relative_to(ROOT)) for p in seen}


def _with_packages(module: str) -> list[Path]:
    """The files importing `module` runs: its packages' first (a, a.b for a.b.c), then its own."""
    parts = module.split(".")
    return [f for depth in range(1, len(parts) + 1)
            if (f := _module_file(".".join(parts[:depth]))) is not None]


@pytest.mark.parametrize("benchmark", BENCHMARKS, ids=lambda b: b.name)
def test_a_benchmark_measures_every_bench_module_it_runs_and_none_it_does_not(
        benchmark: Benchmark) -> None:
    """A change to a module a benchmark runs (its bed, a neighbour's loop it borrows, the load
    generator and the readers it drives) stales its result as a change to its own file does;
    one to a module it does not run, none."""
    runs = _runs(benchmark)
    unlisted = sorted(f for f in runs if (f.startswith("bench/") or f in LOAD_AND_WATCH)
                      and not any(f == m or f.startswith(f"{m}/") for m in benchmark.measures))
    assert not unlisted, f"bench/catalog.py: {benchmark.name} does not list {unlisted}"
    unrun = sorted(m for m in benchmark.measures if m.startswith("bench/")
                   and not any(f == m or f.startswith(f"{m}/") for f in runs))
    assert not unrun, f"bench/catalog.py: {benchmark.name} lists {unrun}, which it does not run"
