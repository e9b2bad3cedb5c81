"""`bench.freshness`: a result is stale once a commit changes the code it measures."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench import freshness, record


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
