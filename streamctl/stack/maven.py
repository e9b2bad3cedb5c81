"""Jar classpaths resolved by Maven, cached under the state dir.

Owns running `mvn dependency:build-classpath` on the pom files in `streamctl/stack/maven/` and
caching each result as `<state>/maven/<pom>-<hash>.classpath`, keyed by the pom's text and the
properties passed to it, so a repeat call does not start Maven at all. The jars themselves stay
in the ordinary Maven cache (~/.m2); nothing here downloads by URL or names a repository.
Neighbours: `broker` (the broker classpath) and `connector` (Spark's Kafka connector).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from streamctl.stack.errors import MavenMissingError, MavenResolutionError

POM_DIR = Path(__file__).with_name("maven")
BROKER_POM = POM_DIR / "kafka-broker.xml"
TOOLS_POM = POM_DIR / "kafka-tools.xml"

# Maven prints colour codes even in batch mode on some terminals; strip them before matching.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_MVN_TIMEOUT_S = 900.0  # a cold ~/.m2 downloads a few hundred MB for the broker


def cache_key(pom_text: str, properties: Mapping[str, str]) -> str:
    """A short stable hash of what determines the resolution result."""
    digest = hashlib.sha256(pom_text.encode())
    for name in sorted(properties):
        digest.update(f"\0{name}={properties[name]}".encode())
    return digest.hexdigest()[:16]


def cache_file(pom: Path, properties: Mapping[str, str], maven_dir: Path) -> Path:
    return maven_dir / f"{pom.stem}-{cache_key(pom.read_text(), properties)}.classpath"


def mvn_command(mvn: str, pom: Path, output: Path, properties: Mapping[str, str]) -> list[str]:
    defines = [f"-D{name}={value}" for name, value in sorted(properties.items())]
    return [
        mvn, "-B", "-q", "-Dstyle.color=never", "dependency:build-classpath",
        f"-Dmdep.outputFile={output}", "-DincludeScope=runtime", *defines, "-f", str(pom),
    ]  # fmt: skip


def error_lines(mvn_output: str) -> list[str]:
    """Maven's `[ERROR]` lines with content, without colour codes or blank `[ERROR]`s."""
    lines = (_ANSI.sub("", line).strip() for line in mvn_output.splitlines())
    return [line for line in lines if line.startswith("[ERROR]") and line != "[ERROR]"]


def parse_classpath(text: str) -> list[Path]:
    return [Path(entry) for entry in text.strip().split(os.pathsep) if entry]


def read_cached(path: Path) -> list[Path] | None:
    """The cached classpath, or None if absent or if ~/.m2 lost any of its jars since."""
    if not path.is_file():
        return None
    jars = parse_classpath(path.read_text())
    return jars if jars and all(jar.is_file() for jar in jars) else None


def resolve_classpath(
    pom: Path,
    maven_dir: Path,
    properties: Mapping[str, str] | None = None,
    *,
    refresh: bool = False,
    remember_failure: bool = False,
) -> list[Path]:
    """The runtime classpath of `pom` as absolute jar paths, from cache or from Maven.

    `remember_failure` caches a failed resolution too (for probes that are expected to fail,
    so that every later call does not pay for a Maven run); `refresh` ignores both caches.
    """
    properties = dict(properties or {})
    target = cache_file(pom, properties, maven_dir)
    failed = target.with_suffix(".failed")
    if not refresh:
        cached = read_cached(target)
        if cached is not None:
            return cached
        if remember_failure and failed.is_file():
            raise MavenResolutionError(_failure_message(pom, failed.read_text().splitlines(), True))
    try:
        text = _run_mvn(pom, properties)
    except _MvnFailed as exc:
        if remember_failure:
            _write_atomic(failed, "\n".join(exc.lines) + "\n")
        raise MavenResolutionError(_failure_message(pom, exc.lines, False)) from None
    failed.unlink(missing_ok=True)
    _write_atomic(target, text)
    return parse_classpath(text)


def require_mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenMissingError(
            "Maven is needed to resolve the Kafka broker and Spark connector jars, but `mvn` "
            "is not on PATH: install Maven (e.g. `apt-get install maven` or `brew install "
            "maven`) and run the command again."
        )
    return mvn


class _MvnFailed(Exception):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines)
        self.lines = lines


def _run_mvn(pom: Path, properties: Mapping[str, str]) -> str:
    """Run Maven once and return the classpath text; raise _MvnFailed with its ERROR lines."""
    mvn = require_mvn()
    with tempfile.TemporaryDirectory(prefix="streamctl-mvn-") as tmp:
        output = Path(tmp) / "classpath.txt"
        try:
            proc = subprocess.run(
                mvn_command(mvn, pom, output, properties),
                capture_output=True, text=True, timeout=_MVN_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            # Not a _MvnFailed: a slow network is transient and must not be remembered.
            raise MavenResolutionError(
                f"mvn did not finish resolving {pom.name} within {_MVN_TIMEOUT_S:.0f}s; "
                "check your network or Maven mirror settings and run the command again."
            ) from exc
        if proc.returncode != 0 or not output.is_file():
            lines = error_lines(proc.stdout + proc.stderr) or [f"mvn exited {proc.returncode}"]
            raise _MvnFailed(lines)
        return output.read_text()


def _failure_message(pom: Path, lines: Sequence[str], cached: bool) -> str:
    origin = " (remembered from an earlier run; retry with `streamctl stack resolve --refresh`)"
    head = f"Maven could not resolve {pom.name}{origin if cached else ''}:"
    return "\n".join([head, *(f"  {line}" for line in lines)])


def _write_atomic(path: Path, text: str) -> None:
    """Write via rename so a concurrent reader never sees a half-written cache file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
