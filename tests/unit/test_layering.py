"""The layering, enforced: every import (lazy ones inside functions too) of every project
module, parsed with ast, against the package map in docs/architecture.md (the rule, written
once, where a newcomer reads it); plus the rules beyond the project (who may import pyspark,
confluent-kafka, prometheus-client, a clock) and a few single-owner rules (one Kafka client
config builder, one error root per process, no bundled job named by the runtime)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = {"schemas", "controller", "streaming_jobs", "streamctl"}
"""The installed top-level packages: the project's fixed layout (`controller`, `streaming_jobs`,
`schemas`) and `streamctl`, under which every other one lives, so that no name of a user's
own package (an `options.py`, a `security/`) shadows one of ours or is shadowed by it."""


def test_the_installed_top_level_packages_are_the_projects_own() -> None:
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["packages"]["find"]["include"]
    assert {pattern.rstrip("*") for pattern in include} == PROJECT
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"bench", "tests"}
    assert on_disk == PROJECT

def test_one_builder_makes_every_kafka_clients_configuration() -> None:
    """`streamctl.security.kafka.client_config`: nothing else spells where Kafka is."""
    spelled = [p for p in sorted({*ALL, *modules("streamctl"), *modules("bench")})
               if "\"bootstrap.servers\"" in (ROOT / p).read_text()]
    assert spelled == ["streamctl/security/kafka.py"]


KAFKA_ADAPTERS = {"controller/kafka/clients.py", "controller/kafka/traces.py",
                  "controller/kafka/history.py", "controller/kafka/lease.py",
                  "streamctl/fetch_guard/__init__.py",
                  "streaming_jobs/runtime/kafka.py",
                  "streaming_jobs/runtime/sink/transactional_kafka.py"}
"""The only modules that may import confluent_kafka."""

CONTROLLER_PROMETHEUS_ADAPTERS = {"controller/explain/prom.py",
                                  "controller/explain/model_series.py"}
"""The only controller modules that may import prometheus_client."""


def modules(package: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py"))


def imported_modules(path: str) -> set[str]:
    """Each module `path` imports (lazily too), by full name: `from p import m` names `p.m`
    when m is a module or package of the project, else `p`."""
    tree = ast.parse((ROOT / path).read_text(), filename=path)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            base = ROOT / node.module.replace(".", "/")
            subs = {f"{node.module}.{a.name}" for a in node.names
                    if (base / f"{a.name}.py").is_file() or (base / a.name).is_dir()}
            names |= subs if len(subs) == len(node.names) else {node.module, *subs}
    return names


def imported(path: str) -> set[str]:
    """Top-level names of every absolute import in the module."""
    return {name.split(".")[0] for name in imported_modules(path)}


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def package_map() -> dict[str, set[str]]:
    """docs/architecture.md's package map: package → what it may import."""
    text = ARCHITECTURE.read_text().split("## Package map", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_.]+)` \|[^|]*\| ([^|]*) \|$", text, flags=re.MULTILINE)
    assert rows, "no package map in docs/architecture.md"
    return {package: set(re.findall(r"`([a-z_.]+)`", allowed)) for package, allowed in rows}


def packages_on_disk() -> set[str]:
    return {str(p.parent.relative_to(ROOT)).replace("/", ".")
            for top in sorted(PROJECT | {"bench"}) for p in (ROOT / top).rglob("__init__.py")}


def owner(module: str, packages: set[str]) -> str | None:
    """The deepest package of the map that holds `module`."""
    holding = [p for p in packages if module == p or module.startswith(p + ".")]
    return max(holding, key=len) if holding else None


def project_imports(path: str) -> set[str]:
    """The project's modules among `imported_modules(path)`."""
    return {n for n in imported_modules(path) if n.split(".")[0] in PROJECT | {"bench"}}


def test_the_package_map_names_every_package_and_only_those() -> None:
    assert set(package_map()) == packages_on_disk()


MODULES = sorted(p for top in sorted(PROJECT | {"bench"}) for p in modules(top))


@pytest.mark.parametrize("path", MODULES)
def test_each_module_imports_only_what_its_packages_row_allows(path: str) -> None:
    rules = package_map()
    packages = set(rules)
    module = path[:-3].replace("/", ".").removesuffix(".__init__")
    home = module if path.endswith("__init__.py") else owner(module, packages)
    assert home is not None
    allowed = rules[home]
    wrong = set()
    for imported_name in project_imports(path):
        target = owner(imported_name, packages)
        if target == home or target in allowed or any(
                imported_name == a or imported_name.startswith(a + ".") for a in allowed
                if a not in packages):
            continue
        wrong.add(imported_name)
    assert not wrong, (f"{path} ({home}) imports {sorted(wrong)}, which the package map in "
                       "docs/architecture.md does not allow it")


def test_every_allowance_of_the_package_map_is_used() -> None:
    """The map says what each package does import, not what it once did: an allowance no
    module uses would let the next import back in unreviewed."""
    rules = package_map()
    packages = set(rules)
    used: dict[str, set[str]] = {package: set() for package in rules}
    for path in MODULES:
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        home = module if path.endswith("__init__.py") else owner(module, packages)
        assert home is not None
        for name in project_imports(path):
            used[home] |= {a for a in rules[home] if owner(name, packages) == a or (
                a not in packages and (name == a or name.startswith(a + ".")))}
    unused = {package: sorted(rules[package] - used[package]) for package in rules
              if rules[package] - used[package]}
    assert not unused, f"docs/architecture.md allows imports nothing makes: {unused}"


def test_the_query_port_imports_only_its_vocabulary() -> None:
    """`ports` is what the owner drives the query through: it names the desired state and a
    run's labels, never the control protocol that drives it."""
    assert project_imports("streaming_jobs/runtime/ports.py") <= {
        "schemas.records", "streaming_jobs.runtime.desired.state",
        "streaming_jobs.runtime.observe.metrics"}


@pytest.mark.parametrize("path", modules("controller/core"))
def test_the_pure_core_imports_no_client_library_and_no_clock(path: str) -> None:
    names = imported(path)
    assert names & {"confluent_kafka", "prometheus_client", "pyspark", "logging"} == set()
    assert "time" not in names, "the core takes `now_ms`; it has no clock of its own"


ALL = (modules("controller") + modules("streaming_jobs") + modules("schemas")
       + modules("streamctl/security") + modules("streamctl/fetch_guard"))


def test_the_packages_are_found() -> None:
    assert "controller/loop/cycle.py" in ALL and "schemas/codec.py" in ALL
    assert "streamctl/security/kafka.py" in ALL


@pytest.mark.parametrize("path", modules("streamctl/security") + modules("streamctl/options"))
def test_the_shared_leaves_import_no_client_library(path: str) -> None:
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
    names = imported_modules(path)
    assert not {m for m in names if m.startswith("streaming_jobs.runtime.query")}, names
    assert not names & {"pyspark", "confluent_kafka"} and not any(
        m.startswith("pyspark.") for m in names)


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
