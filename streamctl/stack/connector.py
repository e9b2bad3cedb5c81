"""Spark's Kafka connector jars for the installed pyspark, resolved through Maven.

Owns the choice of connector version (exact pyspark version first, else a documented
compatibility pin) and the list of jars to hand to `spark.jars`: the connector's runtime
classpath minus every artifact pyspark already ships in `pyspark/jars/`. pyspark is located
through package metadata, never imported (only `streaming_jobs` imports pyspark).
Neighbours: `maven` (resolution and cache), `cli` (`stack resolve`), and the Spark jobs, which
call `spark_kafka_jars()`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from streamctl.stack.defaults import default_state_dir
from streamctl.stack.errors import MavenResolutionError
from streamctl.stack.maven import POM_DIR, resolve_classpath

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectorCandidate:
    """One way to get the connector: a pom in `streamctl/stack/maven/` plus the properties it
    needs."""

    sql_kafka_version: str
    token_provider_version: str
    pom_name: str
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        if self.sql_kafka_version == self.token_provider_version:
            return f"spark-sql-kafka-0-10_2.13 {self.sql_kafka_version}"
        return (
            f"spark-sql-kafka-0-10_2.13 {self.sql_kafka_version} with "
            f"spark-token-provider-kafka-0-10_2.13 {self.token_provider_version}"
        )


# Neither Spark 4.3.0 nor 4.2.1 connector artifacts were published when this was written, and
# sql-kafka 4.2.0's token-provider 4.2.0 is missing; this combination runs a Kafka read/write
# stream on Spark 4.3.0. It is only offered to pyspark 4.2+ (same major, not older minors).
PINNED = ConnectorCandidate("4.2.0", "4.0.0", "spark-kafka-pinned.xml")
_PIN_APPLIES_FROM = (4, 2)


@dataclass(frozen=True)
class ConnectorResolution:
    pyspark_version: str
    candidate: ConnectorCandidate
    jars: tuple[Path, ...]
    warning: str | None


def exact_candidate(pyspark_version: str) -> ConnectorCandidate:
    return ConnectorCandidate(
        pyspark_version, pyspark_version, "spark-kafka-exact.xml",
        (("spark.version", pyspark_version),),
    )  # fmt: skip


def connector_candidates(pyspark_version: str) -> tuple[ConnectorCandidate, ...]:
    """The candidates to try, in order: the exact version, then the pin if it applies."""
    exact = exact_candidate(pyspark_version)
    major_minor = tuple(int(part) for part in re.findall(r"\d+", pyspark_version)[:2])
    applies = major_minor[:1] == _PIN_APPLIES_FROM[:1] and major_minor >= _PIN_APPLIES_FROM
    if not applies or pyspark_version == PINNED.sql_kafka_version:
        return (exact,)
    return (exact, PINNED)


def choose_connector(
    candidates: Iterable[ConnectorCandidate], resolves: Callable[[ConnectorCandidate], bool]
) -> ConnectorCandidate | None:
    """The first candidate that resolves; later ones are not tried."""
    return next((candidate for candidate in candidates if resolves(candidate)), None)


def fallback_warning(pyspark_version: str, chosen: ConnectorCandidate) -> str | None:
    if chosen.sql_kafka_version == pyspark_version:
        return None
    return (
        f"Spark's Kafka connector {pyspark_version} does not resolve from your Maven "
        f"repositories; using the compatibility pin {chosen.label} "
        "(see streamctl/stack/connector.py)"
    )


def artifact_name(jar_file_name: str) -> str:
    """`log4j-1.2-api-2.25.4.jar` -> `log4j-1.2-api`: the longest prefix before a version.

    A version starts with a digit and contains a dot (so `zstd-jni-1.5.7-6` keeps `zstd-jni`
    and `hive-exec-2.3.10-core` keeps `hive-exec`).
    """
    stem = jar_file_name.removesuffix(".jar")
    parts = stem.split("-")
    for cut in range(len(parts) - 1, 0, -1):
        if re.fullmatch(r"\d[^-]*\.[^-]*", parts[cut]):
            return "-".join(parts[:cut])
    return stem


def m2_artifact_name(jar: Path) -> str:
    """The artifactId of a jar in a Maven repository layout (`<artifactId>/<version>/<file>`)."""
    artifact, version = jar.parent.parent.name, jar.parent.name
    return artifact if jar.name.startswith(f"{artifact}-{version}") else artifact_name(jar.name)


def without_shipped(jars: Sequence[Path], shipped_jar_names: Iterable[str]) -> list[Path]:
    """Drop jars whose artifact pyspark already ships (in any version: pyspark's one wins)."""
    shipped = {artifact_name(name) for name in shipped_jar_names}
    return [jar for jar in jars if m2_artifact_name(jar) not in shipped]


def pyspark_version() -> str:
    return importlib.metadata.version("pyspark")


def pyspark_jar_names() -> list[str]:
    jars_dir = Path(str(importlib.metadata.distribution("pyspark").locate_file("pyspark/jars")))
    return sorted(path.name for path in jars_dir.glob("*.jar"))


def resolve_connector(
    state_dir: Path | None = None, *, refresh: bool = False, version: str | None = None
) -> ConnectorResolution:
    """Resolve the connector for `version` (default: installed pyspark); cached after a run."""
    version = version or pyspark_version()
    maven_dir = (state_dir or default_state_dir()) / "maven"
    found: dict[ConnectorCandidate, list[Path]] = {}
    failures: list[str] = []

    def resolves(candidate: ConnectorCandidate) -> bool:
        try:
            found[candidate] = resolve_classpath(
                POM_DIR / candidate.pom_name, maven_dir, dict(candidate.properties),
                refresh=refresh, remember_failure=candidate is not PINNED,
            )  # fmt: skip
        except MavenResolutionError as exc:
            failures.append(str(exc))
            return False
        return True

    chosen = choose_connector(connector_candidates(version), resolves)
    if chosen is None:
        raise MavenResolutionError(
            f"no Spark Kafka connector for pyspark {version} resolves:\n" + "\n".join(failures)
        )
    jars = without_shipped(found[chosen], pyspark_jar_names())
    return ConnectorResolution(version, chosen, tuple(jars), fallback_warning(version, chosen))


@functools.cache
def _resolved(state_dir: Path | None) -> ConnectorResolution:
    resolution = resolve_connector(state_dir)
    if resolution.warning:
        log.warning(resolution.warning)  # once per process, not once per SparkSession
    return resolution


def spark_kafka_jars(state_dir: Path | None = None) -> list[Path]:
    """Absolute paths for `spark.jars`: the Kafka connector and what pyspark lacks of its deps."""
    return list(_resolved(state_dir).jars)

