"""The deployment files as data, and what the code says they should contain.

Owns reading `docker-compose.yml`, `deploy/prometheus.yml` and the Grafana dashboard, and the
"truth from the code" they are checked against: the environment variables each process reads
(from `JobConfig`'s fields, the controller's settings and every `STREAMCTL_*` string constant in
the sources), the metric names the code defines, the topics in `streamctl/stack/defaults.py`.
Everything is computed from the code each time, so the checks follow the code as it grows.
Neighbours: the tests in this package; `streamctl.reference` (the metrics registries it renders
docs/metrics.md from).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from streamctl.processes import Child

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
SECURE_COMPOSE_FILE = ROOT / "docker-compose.secure.yml"
CLUSTER_COMPOSE_FILE = ROOT / "docker-compose.cluster.yml"
PROMETHEUS_FILE = ROOT / "deploy" / "prometheus.yml"
SECURE_PROMETHEUS_FILE = ROOT / "deploy" / "prometheus.secure.yml"
EXAMPLE_COMPOSE_FILE = ROOT / "examples" / "clickstream" / "docker-compose.yml"
DASHBOARD_DIR = ROOT / "deploy" / "grafana" / "dashboards"
GRAFANA_PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
PROJECT_IMAGE = "streamctl:"

# Which packages each kind of project process imports (and so which env constants it may read).
_PROCESS_SOURCES = {
    "job": ("streaming_jobs", "schemas", "streamctl/stack", "streamctl/cli.py",
            "streamctl/security"),
    "controller": ("controller", "schemas", "streamctl/stack", "streamctl/cli.py",
                   "streamctl/security"),
    "topics": ("streamctl/stack", "streamctl/cli.py", "streamctl/security/kafka.py"),
    "load": ("streamctl", "schemas", "streamctl/security/kafka.py"),
}
_COMMANDS = {
    ("job", "run"): "job", ("controller", "run"): "controller", ("stack", "topics"): "topics",
    ("produce",): "load",
}
_ENV_CONSTANT = re.compile(r"^STREAMCTL_[A-Z0-9_]*[A-Z0-9]$")


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def secure_compose() -> dict[str, Any]:
    """docker-compose.yml with docker-compose.secure.yml applied (`merged`)."""
    return merged(load_yaml(SECURE_COMPOSE_FILE))


def cluster_compose() -> dict[str, Any]:
    """docker-compose.yml with docker-compose.cluster.yml applied (`merged`)."""
    return merged(load_yaml(CLUSTER_COMPOSE_FILE))


def example_compose() -> dict[str, Any]:
    """docker-compose.yml with the clickstream example's override applied (`merged`)."""
    return merged(load_yaml(EXAMPLE_COMPOSE_FILE))


def merged(override: Mapping[str, Any]) -> dict[str, Any]:
    """docker-compose.yml with `override` applied as `docker compose -f … -f …` does for the
    keys these files use: environments and secrets merge, volumes merge by their target path,
    anything else (command, healthcheck test) is replaced."""
    base = compose()
    merged = {name: dict(service) for name, service in base["services"].items()}
    for name, changes in override["services"].items():
        service = merged.setdefault(name, {})
        for key, value in changes.items():
            service[key] = _merge(key, service.get(key), value)
    return {**base, "services": merged,
            "secrets": {**base.get("secrets", {}), **override.get("secrets", {})},
            "volumes": {**base.get("volumes", {}), **override.get("volumes", {})}}


def _merge(key: str, old: Any, new: Any) -> Any:
    if old is None:
        return new
    if key == "environment":
        return {**environment({key: old}), **environment({key: new})}
    if key == "secrets":
        return list(dict.fromkeys([*old, *new]))
    if key == "volumes":
        by_target = {v.split(":")[1]: v for v in [*old, *new]}
        return list(by_target.values())
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **new}
    return new


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as strings (YAML anchors and merge keys already resolved)."""
    env = service.get("environment") or {}
    if isinstance(env, list):  # the `- KEY=value` form
        env = dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def is_project_service(service: Mapping[str, Any]) -> bool:
    return str(service.get("image", "")).startswith(PROJECT_IMAGE)


def process_kind(service: Mapping[str, Any]) -> str | None:
    """Which project process a service runs, from its command (None: not a streamctl one)."""
    command = service.get("command") or []
    if not command or command[0] != "streamctl":
        return None
    for prefix, kind in _COMMANDS.items():
        if tuple(command[1 : 1 + len(prefix)]) == prefix:
            return kind
    raise AssertionError(f"unknown streamctl command in compose: {command}")


# --- what the code reads ------------------------------------------------------------------------


def env_constants(*sources: str) -> set[str]:
    """`STREAMCTL_*` string constants in the given packages or files (the names read literally)."""
    found: set[str] = set()
    for source in sources:
        path = ROOT / source
        if not path.exists():  # a moved package must not quietly read as "reads nothing"
            raise FileNotFoundError(f"no source {source} under {ROOT}")
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and _ENV_CONSTANT.match(node.value):
                    found.add(node.value)
    return found


def job_env_vars() -> dict[str, Any]:
    """`STREAMCTL_<FIELD>` of every `JobConfig` field read from a variable of that name, with
    the field's default."""
    from streaming_jobs.config import DERIVED, OWN_VARIABLES, env_var, flat_fields

    return {env_var(f.name): f.default for f in flat_fields()
            if f.name not in OWN_VARIABLES | DERIVED}


def controller_env_vars() -> dict[str, Any]:
    """The environment name of every controller setting, with its default."""
    from controller.cli import GROUPS, options

    return {o.env: o.default for group in GROUPS for o in options(group)}


def env_read_by(kind: str) -> set[str]:
    names = env_constants(*_PROCESS_SOURCES[kind])
    if kind == "job":
        names |= set(job_env_vars())
    if kind == "controller":
        names |= set(controller_env_vars())
    return names


# --- topics -------------------------------------------------------------------------------------


def topic_fields_in_code() -> dict[str, str]:
    """Every topic the code uses by default: `*_topic` fields of the job and controller config."""
    from controller.settings import KafkaSettings
    from streaming_jobs.config import flat_fields
    from streaming_jobs.loading import bundled, load

    used = {f"JobConfig.{f.name}": str(f.default) for f in flat_fields()
            if f.name.endswith("_topic") and f.default}
    for job in map(load, bundled()):  # the defaults of the job options without one
        used |= {f"{job.name}.topics.input": job.topics.input,
                 f"{job.name}.topics.output": job.topics.output,
                 f"{job.name}.topics.dead_letters": job.topics.resolved_dead_letters()}
    used |= {f"KafkaSettings.{f.name}": str(f.default) for f in fields(KafkaSettings)
             if f.name.endswith("_topic")}
    return used


# --- metrics ------------------------------------------------------------------------------------

_SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",),
             "histogram": ("_bucket", "_sum", "_count", "_created"),
             "summary": ("_sum", "_count", "_created", ""), "info": ("_info",)}


def metric_families() -> dict[str, str]:
    """Every metric the project's registries expose, by family name → type (the job's, its
    counters read at scrape time included, and the controller's)."""
    from streamctl.reference import registries

    return {family.name: family.type for registry in registries().values()
            for family in registry.collect()}


def exported_metric_names() -> set[str]:
    """Sample names the project's registries expose (counters with `_total`, etc.)."""
    return {name + suffix for name, kind in metric_families().items()
            for suffix in _SUFFIXES.get(kind, ("",))}


def documented_metric_names() -> set[str]:
    """The name a reader looks a metric up by: a counter with `_total`, a histogram by its
    base name, a gauge as it is."""
    return {name + ("_total" if kind == "counter" else "")
            for name, kind in metric_families().items()}


# --- Prometheus and Grafana ---------------------------------------------------------------------


@dataclass(frozen=True)
class ScrapeTarget:
    job: str
    host: str
    port: int
    metrics_path: str


def scrape_targets(config: Mapping[str, Any] | None = None) -> list[ScrapeTarget]:
    """Every target of `config` (default deploy/prometheus.yml)."""
    config = load_yaml(PROMETHEUS_FILE) if config is None else config
    targets = []
    for job in config["scrape_configs"]:
        path = job.get("metrics_path", "/metrics")
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = target.rsplit(":", 1)
                targets.append(ScrapeTarget(job["job_name"], host, int(port), path))
        for dns in job.get("dns_sd_configs", []):
            targets += [ScrapeTarget(job["job_name"], name, int(dns["port"]), path)
                        for name in dns["names"]]
    return targets


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def panel_queries(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL expression) of every panel target and annotation, rows included."""
    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
        for panel in panels:
            for target in panel.get("targets", []):
                yield f"panel {panel['title']!r} {target.get('refId', '')}", target["expr"]
            yield from walk(panel.get("panels", []))

    yield from walk(dashboard.get("panels", []))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            yield f"annotation {annotation['name']!r}", annotation["expr"]


_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "le", "inf", "nan",
}
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"')
_SELECTORS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    label matchers, grouping labels or durations."""
    text = _GROUPING.sub(" ", _RANGES.sub(" ", _SELECTORS.sub(" ", _STRINGS.sub(" ", expr))))
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group().lower() in _PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


def grafana_to_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables filled in as the dashboard would."""
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", "15s")
            .replace('"$query"', '".*"'))


# --- running a compose service as a local process -----------------------------------------------


@dataclass(frozen=True)
class LocalMapping:
    """How a compose service's settings become a local process's (docs/deploy.md, "Without
    Docker"): in-network addresses to loopback ones, in-container ports to free local ports
    (variables named `*_PORT` and scrape targets alike), container paths to local directories."""

    addresses: Mapping[str, str]
    """e.g. {"kafka:19092": "127.0.0.1:41234"}."""
    ports: Mapping[int, int]
    """In-container port -> local port, e.g. {9301: 40111}."""
    paths: Mapping[str, str]
    """Container path prefix -> local directory prefix, e.g. {"/run/secrets/": "/tmp/x/"}."""

    def value(self, name: str, value: str) -> str:
        if value in self.addresses:
            return self.addresses[value]
        if name.endswith("_PORT") and value.isdigit() and int(value) in self.ports:
            return str(self.ports[int(value)])
        for prefix, local in self.paths.items():
            if value.startswith(prefix):
                return local + value[len(prefix):]
        return value

    def environment(self, service: Mapping[str, Any]) -> dict[str, str]:
        return {k: self.value(k, v) for k, v in environment(service).items()}

    def target(self, host: str, port: int) -> str:
        """Where a scrape target `host:port` of a locally running service is reached."""
        return f"127.0.0.1:{self.ports[port]}"


def local_secrets(compose_file: Mapping[str, Any], directory: Path) -> dict[str, str]:
    """/run/secrets/<name> -> where its file (`deploy/secrets/<file>`) is in `directory`."""
    return {f"/run/secrets/{name}": str(directory / Path(secret["file"]).name)
            for name, secret in compose_file.get("secrets", {}).items()}


def secret_mounts(service: Mapping[str, Any]) -> dict[str, str]:
    """Path in the container -> secret name, for the secrets a service mounts (short form)."""
    return {f"/run/secrets/{name}": name for name in service.get("secrets", [])}


def local_prometheus_config(mapping: LocalMapping, running: set[str],
                            path: Path = PROMETHEUS_FILE) -> dict[str, Any]:
    """A Prometheus config (default `deploy/prometheus.yml`) with the targets of the locally
    running services rewritten to their local ports, every other target (Spark, the standby
    job) left out, and secret files (`*_file`) mapped to local paths."""
    config = load_yaml(path)
    jobs = []
    for job in config["scrape_configs"]:
        targets = [mapping.target(host, int(port)) for static in job.get("static_configs", [])
                   for host, port in (t.rsplit(":", 1) for t in static["targets"])
                   if host in running]
        if targets:
            kept = {k: _local_files(mapping, v) for k, v in job.items()
                    if not k.endswith("_sd_configs")}
            jobs.append({**kept, "static_configs": [{"targets": targets}]})
    rules = [str(path.parent / f) for f in config.get("rule_files", [])]  # it moves elsewhere
    return {**config, "scrape_configs": jobs, "rule_files": rules}


def _local_files(mapping: LocalMapping, value: Any) -> Any:
    if isinstance(value, dict):
        return {k: mapping.value(k.upper(), v) if k.endswith("_file") else _local_files(mapping, v)
                for k, v in value.items()}
    return value


def outside_environment() -> dict[str, str]:
    """This process's environment without any STREAMCTL_* variable: a service gets exactly
    the ones its compose entry sets."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STREAMCTL_")}


def start_service(name: str, command: list[str], env: Mapping[str, str],
                  log_dir: Path) -> Child:
    """A service's `streamctl …` command as `python -m streamctl …` in the repository, with
    exactly the given STREAMCTL_* variables; its output in `<log_dir>/<name>.log`."""
    assert command[0] == "streamctl", command
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "streamctl", *command[1:]], cwd=ROOT,
        env={**outside_environment(), **env, "PYTHONUNBUFFERED": "1"}, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    return Child(name, process, log_path, log)
