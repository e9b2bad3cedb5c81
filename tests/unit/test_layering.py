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
PROJECT = {"schemas", "controller", "streaming_jobs", "stack", "streamctl", "security",
           "options"}

def test_one_builder_makes_every_kafka_clients_configuration() -> None:
    """`security.kafka.client_config`: nothing else spells where Kafka is."""
    spelled = [p for p in ALL + modules("stack") + modules("streamctl") + modules("bench")
               if "\"bootstrap.servers\"" in (ROOT / p).read_text()]
    assert spelled == ["security/kafka.py"]


KAFKA_ADAPTERS = {"controller/kafka/clients.py", "controller/kafka/traces.py",
                  "controller/kafka/history.py",
                  "streaming_jobs/runtime/kafka.py",
                  "streaming_jobs/runtime/sink/transactional_kafka.py"}
"""The only modules that may import confluent_kafka."""

CONTROLLER_PROMETHEUS_ADAPTERS = {"controller/explain/prom.py"}
"""The only controller module that may import prometheus_client."""


def modules(package: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py"))


def full_imports(path: str) -> set[str]:
    """Every absolute import's full module name (`from a.b import c` → `a.b`, and `a.b.c`
    when `c` is a module: a package's submodule imported by name)."""
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names
                         if (ROOT / node.module.replace(".", "/") / f"{alias.name}.py").is_file())
    return names


CONTROLLER_LAYERS = {
    "controller/core": ("controller.settings", "controller.errors", "controller.core"),
    "controller/explain": ("controller.settings", "controller.errors", "controller.core",
                           "controller.explain"),
    "controller/loop": ("controller.settings", "controller.errors", "controller.core",
                        "controller.explain", "controller.loop"),
    "controller/kafka": ("controller.settings", "controller.errors", "controller.core",
                         "controller.loop.ports", "controller.kafka", "controller.replay.trace"),
    "controller/replay": ("controller.settings", "controller.errors", "controller.core",
                          "controller.loop", "controller.replay"),
}
"""What each layer of the controller may import of the controller (docs/architecture.md):
the pure core only itself and the settings; the adapters the ports they implement."""


@pytest.mark.parametrize("layer", sorted(CONTROLLER_LAYERS))
def test_each_controller_layer_imports_only_the_layers_below_it(layer: str) -> None:
    allowed = CONTROLLER_LAYERS[layer]
    for path in modules(layer):
        inside = {m for m in full_imports(path) if m.startswith("controller")}
        wrong = {m for m in inside if m != "controller"
                 and not any(m == a or m.startswith(a + ".") for a in allowed)}
        assert not wrong, f"{path} imports {sorted(wrong)}"


@pytest.mark.parametrize("path", modules("controller/core"))
def test_the_pure_core_imports_no_client_library_and_no_clock(path: str) -> None:
    names = imported(path)
    assert names & {"confluent_kafka", "prometheus_client", "pyspark", "logging"} == set()
    assert "time" not in names, "the core takes `now_ms`; it has no clock of its own"


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
    assert "controller/loop/cycle.py" in ALL and "schemas/codec.py" in ALL
    assert "security/kafka.py" in ALL


@pytest.mark.parametrize("path", modules("controller"))
def test_controller_imports_only_schemas_security_and_options_of_the_project(path: str) -> None:
    assert imported(path) & (PROJECT - {"controller", "schemas", "security", "options"}) == set()
    assert "pyspark" not in imported(path)


@pytest.mark.parametrize("path", modules("streaming_jobs"))
def test_streaming_jobs_never_import_the_controller(path: str) -> None:
    allowed = {"streaming_jobs", "schemas", "security", "options"}
    assert imported(path) & (PROJECT - allowed) == set()


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


QUERY_DRIVERS = ("streaming_jobs/runtime/owner.py", "streaming_jobs/runtime/roles/standby.py",
                 "streaming_jobs/runtime/roles/supervise.py",
                 "streaming_jobs/runtime/control/reconfigure.py",
                 "streaming_jobs/runtime/ports.py", "streaming_jobs/runtime/fakes.py")
"""What drives a query does it through `ports.QueryControl`: never the Spark query itself."""


@pytest.mark.parametrize("path", QUERY_DRIVERS)
def test_the_query_is_driven_only_through_its_port(path: str) -> None:
    names = full_imports(path)
    assert not {m for m in names if m.startswith("streaming_jobs.runtime.query")}, names
    assert not names & {"pyspark", "confluent_kafka"} and not any(
        m.startswith("pyspark.") for m in names)


@pytest.mark.parametrize("path", modules("options"))
def test_the_options_loader_is_a_leaf(path: str) -> None:
    """The one settings loader the job and the controller share couples them to nothing."""
    assert imported(path) & PROJECT == set()
    assert imported(path) & {"confluent_kafka", "prometheus_client", "pyspark"} == set()


@pytest.mark.parametrize(("package", "root"), [("streaming_jobs", "JobError"),
                                               ("controller", "ControllerError")])
def test_each_process_has_one_error_root(package: str, root: str) -> None:
    """Every error class a process defines descends from its root (`<package>/errors.py`),
    whose families say what the caller does next."""
    import importlib
    import inspect

    errors = importlib.import_module(f"{package}.errors")
    base = getattr(errors, root)
    for path in (p for p in modules(package) if not p.endswith("__main__.py")):
        module = importlib.import_module(path[:-3].replace("/", ".").removesuffix(".__init__"))
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, Exception):
                assert issubclass(cls, base), \
                    f"{path}: {name} does not descend from {package}.errors.{root}"
