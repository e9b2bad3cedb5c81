"""The layering of ARCHITECTURE.md, enforced: every import (including lazy ones inside
functions) of every module of `controller`, `streaming_jobs`, `schemas` and `security`, parsed
with ast. `security` is the leaf both processes share for transport security (docs/architecture.md):
it imports nothing of the project and no client library, so sharing it couples nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = {"schemas", "controller", "streaming_jobs", "stack", "streamctl", "security"}

KAFKA_ADAPTERS = {"controller/kafka_io.py", "controller/trace_kafka.py",
                  "controller/kafka_recovery.py",
                  "streaming_jobs/runtime/kafka.py",
                  "streaming_jobs/runtime/transactional_kafka.py"}
"""The only modules that may import confluent_kafka."""

CONTROLLER_PROMETHEUS_ADAPTERS = {"controller/prom.py"}
"""The only controller module that may import prometheus_client."""


def modules(package: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py"))


def imported(path: str) -> set[str]:
    """Top-level names of every absolute import in the module."""
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


ALL = (modules("controller") + modules("streaming_jobs") + modules("schemas")
       + modules("security"))


def test_the_packages_are_found() -> None:
    assert "controller/loop.py" in ALL and "schemas/codec.py" in ALL
    assert "security/kafka.py" in ALL


@pytest.mark.parametrize("path", modules("controller"))
def test_controller_imports_only_schemas_and_security_of_the_project(path: str) -> None:
    assert imported(path) & (PROJECT - {"controller", "schemas", "security"}) == set()
    assert "pyspark" not in imported(path)


@pytest.mark.parametrize("path", modules("streaming_jobs"))
def test_streaming_jobs_never_import_the_controller(path: str) -> None:
    assert imported(path) & (PROJECT - {"streaming_jobs", "schemas", "security"}) == set()


@pytest.mark.parametrize("path", modules("schemas"))
def test_schemas_import_nothing_of_the_project(path: str) -> None:
    assert imported(path) & (PROJECT - {"schemas"}) == set()


@pytest.mark.parametrize("path", modules("security"))
def test_security_is_a_leaf_without_client_libraries(path: str) -> None:
    assert imported(path) & (PROJECT - {"security"}) == set()
    assert imported(path) & {"confluent_kafka", "prometheus_client", "pyspark"} == set()


@pytest.mark.parametrize("path", ALL)
def test_only_adapters_import_kafka_and_prometheus(path: str) -> None:
    names = imported(path)
    if path not in KAFKA_ADAPTERS:
        assert "confluent_kafka" not in names
    if path.startswith("controller/") and path not in CONTROLLER_PROMETHEUS_ADAPTERS:
        assert "prometheus_client" not in names


@pytest.mark.parametrize("path", ALL)
def test_only_streaming_jobs_import_pyspark(path: str) -> None:
    if not path.startswith("streaming_jobs/"):
        assert "pyspark" not in imported(path)


BUNDLED = ("sensor-averages", "fraud-detection", "sensor_averages", "fraud", "sensor",
           "card-transactions", "click", "clicks", "clickstream", "click-sessions")
"""Names of the bundled and example jobs, their modules and domains."""


@pytest.mark.parametrize("path", modules("streaming_jobs/runtime") + modules("controller"))
def test_the_runtime_and_the_controller_name_no_bundled_job(path: str) -> None:
    """They serve any user's job: the bundled ones are plugins like any other."""
    text = (ROOT / path).read_text().lower()
    words = set(re.findall(r"[a-z_-]+", text))
    assert not words & set(BUNDLED), sorted(words & set(BUNDLED))
