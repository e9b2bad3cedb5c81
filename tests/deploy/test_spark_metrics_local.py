"""The compose file's Spark master and worker, run locally from the pyspark distribution.

E2E tier, no Docker: `spark-master` and `spark-worker` run with their compose `command` and
`environment` (the official image's `/opt/spark/bin/spark-class` and the project image's
`spark-class` are both pyspark's own, the same Spark version; host names and ports mapped to
loopback, the mounted `deploy/spark/metrics.properties` to the repository's file). Checks that
the worker registers and that every Spark scrape path of `deploy/prometheus.yml` serves
Prometheus text, which is what the Spark panels of a deployment depend on.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stack.waiting import poll_until
from streamctl.processes import Child
from tests.deploy import deployment as d

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SERVICES = d.services()
SPARK_HOME = Path(importlib.util.find_spec("pyspark").origin).parent  # type: ignore[union-attr,arg-type]


def _mounts(service: dict) -> dict[str, str]:
    """Container path -> repository path of a service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            mounts[target] = str(d.ROOT / source[2:])
    return mounts


def _local(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        text = text.replace(old, new)
    return text


def _start(name: str, replacements: dict[str, str], tmp: Path) -> Child:
    service = SERVICES[name]
    replacements = {**replacements, **_mounts(service)}
    command = [_local(arg, replacements) for arg in service["command"]]
    command[0] = str(SPARK_HOME / "bin" / "spark-class")
    env = {k: _local(v, replacements) for k, v in d.environment(service).items()}
    env |= {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(tmp / "work")}  # not inside the venv's pyspark
    log_path = tmp / f"{name}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    return Child(name, process, log_path, log)


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None


def _value(text: str | None, name: str) -> float | None:
    """The sample's value, or None while the daemon's UI answers with HTML: Spark binds the
    web UI first and attaches the metrics servlets a moment later."""
    try:
        for family in text_string_to_metric_families(text or ""):
            for sample in family.samples:
                if sample.name == name:
                    return float(sample.value)
    except ValueError:
        return None
    return None


def _families(text: str | None) -> list[object] | None:
    try:
        return list(text_string_to_metric_families(text)) if text else None
    except ValueError:  # HTML from the UI while the servlets are not attached yet
        return None


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    tmp = tmp_path_factory.mktemp("spark")
    master_port, master_ui, worker_ui = d.listen_ports(3)
    ports = {"spark-master": master_ui, "spark-worker": worker_ui}
    replacements = {"spark-master": "127.0.0.1", "7077": str(master_port),
                    "8080": str(master_ui), "8081": str(worker_ui)}
    children = [_start("spark-master", replacements, tmp),
                _start("spark-worker", replacements, tmp)]
    master_url = f"http://127.0.0.1:{master_ui}/metrics/master/prometheus/"

    def registered() -> bool | None:
        for child in children:
            assert child.alive(), f"{child.name} exited:\n{child.log_tail()}"
        return True if _value(_scrape(master_url), "metrics_master_aliveWorkers_Value") \
            == 1 else None

    try:
        assert poll_until(registered, 150.0, 1.0), \
            "\n".join(f"--- {c.name}\n{c.log_tail(10)}" for c in children)
        yield ports
    finally:
        for child in reversed(children):
            child.stop(timeout_s=20.0)


SPARK_TARGETS = [t for t in d.scrape_targets() if t.host.startswith("spark-")]


def test_prometheus_config_scrapes_the_spark_master_and_workers() -> None:
    assert {t.host for t in SPARK_TARGETS} == {"spark-master", "spark-worker"}


@pytest.mark.parametrize("target", SPARK_TARGETS, ids=lambda t: t.job)
def test_every_spark_scrape_path_serves_prometheus_text(
        spark_cluster: dict[str, int], target: d.ScrapeTarget) -> None:
    url = f"http://127.0.0.1:{spark_cluster[target.host]}{target.metrics_path}"
    families = poll_until(lambda: _families(_scrape(url)), 30.0, 1.0)
    assert families and len(families) > 10, f"{target.job}: no Prometheus text at {url}"
    text = _scrape(url) or ""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `./dev setup` installs Debian's prometheus package"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
    # 3 is lint only (Spark's camelCase names, no HELP lines); 1 would be text that does not parse.
    assert check.returncode in (0, 3), check.stdout[-2000:] + check.stderr[-2000:]
