"""Maven resolution: cache keys, error reporting, and never running Maven when cached."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamctl.stack.errors import MavenMissingError, MavenResolutionError
from streamctl.stack.maven import (
    BROKER_POM,
    POM_DIR,
    cache_file,
    cache_key,
    error_lines,
    mvn_command,
    resolve_classpath,
)


@pytest.fixture
def no_mvn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH without Maven (or anything else), so any attempt to run mvn fails loudly."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_cache_key_depends_on_pom_text_and_properties() -> None:
    assert cache_key("<a/>", {"v": "1"}) == cache_key("<a/>", {"v": "1"})
    assert cache_key("<a/>", {"v": "1"}) != cache_key("<a/>", {"v": "2"})
    assert cache_key("<a/>", {}) != cache_key("<b/>", {})


def test_error_lines_keep_only_maven_errors_with_content() -> None:
    output = "\x1b[0m[INFO] ok\n[ERROR] Failed to execute goal: missing x\n[ERROR] \n\x1b[0m"
    assert error_lines(output) == ["[ERROR] Failed to execute goal: missing x"]


def test_mvn_command_names_the_pom_and_output_but_no_repository() -> None:
    cmd = mvn_command("mvn", BROKER_POM, Path("/tmp/cp.txt"), {"spark.version": "4.3.0"})
    assert cmd[-2:] == ["-f", str(BROKER_POM)]
    assert "-Dspark.version=4.3.0" in cmd and "-DincludeScope=runtime" in cmd
    assert not any("http" in part for part in cmd)


def test_poms_name_no_repository_host() -> None:
    for pom in POM_DIR.glob("*.xml"):
        text = pom.read_text()
        assert "<repositories>" not in text and "https://" not in text, pom.name


def test_cached_classpath_is_returned_without_running_maven(tmp_path: Path, no_mvn: None) -> None:
    jars = [tmp_path / "a-1.0.jar", tmp_path / "b-2.0.jar"]
    for jar in jars:
        jar.touch()
    target = cache_file(BROKER_POM, {}, tmp_path / "maven")
    target.parent.mkdir()
    target.write_text(os.pathsep.join(map(str, jars)))
    assert resolve_classpath(BROKER_POM, tmp_path / "maven") == jars


def test_a_cache_pointing_at_deleted_jars_resolves_again(tmp_path: Path, no_mvn: None) -> None:
    target = cache_file(BROKER_POM, {}, tmp_path / "maven")
    target.parent.mkdir()
    target.write_text(str(tmp_path / "gone-1.0.jar"))
    with pytest.raises(MavenMissingError, match="install Maven"):
        resolve_classpath(BROKER_POM, tmp_path / "maven")


def test_a_remembered_failure_is_raised_without_running_maven(tmp_path: Path, no_mvn: None) -> None:
    target = cache_file(BROKER_POM, {}, tmp_path / "maven")
    target.parent.mkdir()
    target.with_suffix(".failed").write_text("[ERROR] Could not find artifact x:y:jar:1\n")
    with pytest.raises(MavenResolutionError, match=r"--refresh(.|\n)*Could not find artifact"):
        resolve_classpath(BROKER_POM, tmp_path / "maven", remember_failure=True)
    with pytest.raises(MavenMissingError):
        resolve_classpath(BROKER_POM, tmp_path / "maven", remember_failure=True, refresh=True)
