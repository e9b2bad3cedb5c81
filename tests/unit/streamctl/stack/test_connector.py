"""Choosing Spark's Kafka connector version and trimming what pyspark already ships."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from streamctl.stack.connector import (
    PINNED,
    ConnectorCandidate,
    artifact_name,
    choose_connector,
    connector_candidates,
    exact_candidate,
    fallback_warning,
    without_shipped,
)


def resolving(*sql_kafka_versions: str) -> Callable[[ConnectorCandidate], bool]:
    return lambda candidate: candidate.sql_kafka_version in sql_kafka_versions


def test_exact_version_is_chosen_when_it_resolves() -> None:
    chosen = choose_connector(connector_candidates("4.3.0"), resolving("4.3.0", "4.2.0"))
    assert chosen == exact_candidate("4.3.0")
    assert chosen is not None and dict(chosen.properties) == {"spark.version": "4.3.0"}
    assert fallback_warning("4.3.0", chosen) is None


def test_pin_is_chosen_when_the_exact_version_does_not_resolve() -> None:
    chosen = choose_connector(connector_candidates("4.3.0"), resolving("4.2.0"))
    assert chosen == PINNED
    assert (chosen.sql_kafka_version, chosen.token_provider_version) == ("4.2.0", "4.0.0")
    warning = fallback_warning("4.3.0", chosen)
    assert warning is not None and "4.3.0" in warning and "4.2.0" in warning


def test_nothing_is_chosen_when_nothing_resolves() -> None:
    assert choose_connector(connector_candidates("4.3.0"), resolving()) is None


def test_candidates_are_tried_in_order_and_stop_at_the_first_success() -> None:
    tried: list[str] = []

    def resolves(candidate: ConnectorCandidate) -> bool:
        tried.append(candidate.sql_kafka_version)
        return True

    choose_connector(connector_candidates("4.3.0"), resolves)
    assert tried == ["4.3.0"]


def test_pin_is_offered_only_to_pyspark_4_2_and_later_4_x() -> None:
    assert connector_candidates("4.3.0") == (exact_candidate("4.3.0"), PINNED)
    assert connector_candidates("4.2.1") == (exact_candidate("4.2.1"), PINNED)
    for version in ("3.5.1", "4.1.0", "5.0.0", "4.2.0"):
        assert connector_candidates(version) == (exact_candidate(version),)


def test_artifact_name_strips_versions_and_classifiers() -> None:
    assert artifact_name("kafka-clients-3.9.2.jar") == "kafka-clients"
    assert artifact_name("scala-library-2.13.17.jar") == "scala-library"
    assert artifact_name("scala-parallel-collections_2.13-1.2.0.jar") == (
        "scala-parallel-collections_2.13"
    )
    assert artifact_name("log4j-1.2-api-2.25.4.jar") == "log4j-1.2-api"
    assert artifact_name("hive-exec-2.3.10-core.jar") == "hive-exec"
    assert artifact_name("zstd-jni-1.5.7-6.jar") == "zstd-jni"
    assert (
        artifact_name("netty-tcnative-boringssl-static-2.0.76.Final-linux-x86_64.jar")
        == "netty-tcnative-boringssl-static"
    )


_SEGMENT = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)


@given(
    st.lists(_SEGMENT, min_size=1, max_size=4).map("-".join),
    st.lists(st.integers(0, 99).map(str), min_size=2, max_size=4).map(".".join),
)
def test_artifact_name_inverts_maven_file_naming(artifact: str, version: str) -> None:
    assert artifact_name(f"{artifact}-{version}.jar") == artifact


def m2(group: str, artifact: str, version: str) -> Path:
    return Path("/m2", *group.split("."), artifact, version, f"{artifact}-{version}.jar")


def test_jars_pyspark_ships_are_dropped_whatever_their_version() -> None:
    resolved = [
        m2("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0"),
        m2("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "4.0.0"),
        m2("org.apache.kafka", "kafka-clients", "3.9.2"),
        m2("org.apache.commons", "commons-pool2", "2.13.1"),
        m2("org.scala-lang", "scala-library", "2.13.15"),
        m2("org.apache.hadoop", "hadoop-client-runtime", "3.4.1"),
        m2("org.slf4j", "slf4j-api", "1.7.36"),
        m2("at.yawk.lz4", "lz4-java", "1.10.1"),
        m2("org.apache.spark", "spark-tags_2.13", "4.2.0"),
        m2("org.scala-lang.modules", "scala-parallel-collections_2.13", "1.2.0"),
    ]
    shipped = [
        "scala-library-2.13.17.jar", "hadoop-client-runtime-3.5.0.jar", "slf4j-api-2.0.17.jar",
        "lz4-java-1.11.0.jar", "spark-tags_2.13-4.3.0.jar", "commons-pool-1.5.4.jar",
        "scala-parallel-collections_2.13-1.2.0.jar", "log4j-1.2-api-2.25.4.jar",
    ]  # fmt: skip
    kept = [jar.name for jar in without_shipped(resolved, shipped)]
    assert kept == [
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
        "kafka-clients-3.9.2.jar",
        "commons-pool2-2.13.1.jar",
    ]
