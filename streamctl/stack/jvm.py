"""Finding a Java runtime that can run the Kafka broker.

Owns locating `java` (JAVA_HOME first, like Kafka's own scripts, then PATH) and checking its
major version. Neighbour: `broker`, which calls `require_java` before anything else.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from streamctl.stack.errors import JavaMissingError, JavaTooOldError

MIN_JAVA_MAJOR = 17  # Kafka 4.x brokers require Java 17
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def parse_java_major(version_output: str) -> int | None:
    """The major version in `java -version` output; `1.8.0_x` counts as 8."""
    match = _VERSION.search(version_output)
    if match is None:
        return None
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


def find_java(env: Mapping[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return Path(home) / "bin" / "java"
    found = shutil.which("java", path=env.get("PATH", ""))
    return Path(found) if found else None


def require_java(env: Mapping[str, str] | None = None, minimum: int = MIN_JAVA_MAJOR) -> Path:
    """The java executable to use, or an error saying what to install."""
    java = find_java(env)
    if java is None:
        raise JavaMissingError(
            f"Java {minimum}+ is needed to run the Kafka broker, but there is no `java` on PATH "
            f"or in $JAVA_HOME/bin: install a JDK {minimum} or newer (e.g. `apt-get install "
            f"openjdk-{minimum}-jre-headless`) or set JAVA_HOME to one."
        )
    output = _version_output(java)
    major = parse_java_major(output)
    if major is None or major < minimum:
        found = f"Java {major}" if major is not None else f"an unrecognised Java ({output[:80]!r})"
        raise JavaTooOldError(
            f"{java} is {found}, but the Kafka broker needs Java {minimum}+: install a newer "
            "JDK and put it first on PATH or set JAVA_HOME to it."
        )
    return java


def _version_output(java: Path) -> str:
    try:
        proc = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaMissingError(f"{java} could not be run ({exc}): install Java 17+.") from exc
    return proc.stderr + proc.stdout  # java prints its version on stderr
