"""streaming_jobs imports nothing of the project but `schemas`; only its Kafka adapter module
imports confluent_kafka."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "streaming_jobs"
PROJECT = {"schemas", "controller", "stack", "streamctl", "streaming_jobs"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_streaming_jobs_imports_only_schemas_of_the_project() -> None:
    for path in PACKAGE.rglob("*.py"):
        assert imported_roots(path) & PROJECT <= {"schemas", "streaming_jobs"}, path


def test_only_the_kafka_adapter_imports_confluent_kafka() -> None:
    users = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if "confluent_kafka" in imported_roots(p)}
    assert users == {"runtime/kafka.py"}
