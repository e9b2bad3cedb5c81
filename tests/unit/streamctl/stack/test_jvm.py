"""Finding Java 17+, and saying what to install when it is missing or too old."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamctl.stack.errors import JavaMissingError, JavaTooOldError
from streamctl.stack.jvm import parse_java_major, require_java


def fake_java(directory: Path, version_line: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return java


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "11.0.2" 2019-01-15', 11),
        ("something else", None),
    ],
)
def test_parse_java_major(output: str, major: int | None) -> None:
    assert parse_java_major(output) == major


def test_missing_java_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(JavaMissingError, match=r"Java 17\+ .*install a JDK 17"):
        require_java(env={"PATH": str(tmp_path)})


def test_old_java_is_refused(tmp_path: Path) -> None:
    fake_java(tmp_path / "bin", 'openjdk version "11.0.2" 2019-01-15')
    with pytest.raises(JavaTooOldError, match=r"Java 11.*needs Java 17\+"):
        require_java(env={"PATH": str(tmp_path / "bin")})


def test_java_home_wins_over_path(tmp_path: Path) -> None:
    fake_java(tmp_path / "path-bin", 'openjdk version "11.0.2"')
    home_java = fake_java(tmp_path / "home" / "bin", 'openjdk version "21.0.1"')
    env = {"PATH": str(tmp_path / "path-bin"), "JAVA_HOME": str(tmp_path / "home")}
    assert require_java(env=env) == home_java
