"""The compose file's Spark master and worker, run locally from the pyspark distribution.

E2E tier, no Docker: `spark-master` and `spark-worker` run with their compose `command` and
`environment` (`spark_cluster`: pyspark's own Spark, host names and ports mapped to loopback,
the mounted `deploy/spark/metrics.properties` to the repository's file). Checks that every
Spark scrape path of `deploy/prometheus.yml` serves Prometheus text, which is what the Spark
panels of a deployment depend on.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stack.waiting import poll_until
from tests.deploy import deployment as d
from tests.deploy.spark_cluster import scrape, start_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _families(text: str | None) -> list[object] | None:
    try:
        return list(text_string_to_metric_families(text)) if text else None
    except ValueError:  # HTML from the UI while the servlets are not attached yet
        return None


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    cluster = start_cluster(tmp_path_factory.mktemp("spark"))
    try:
        yield cluster.ui_ports
    finally:
        cluster.stop()


SPARK_TARGETS = [t for t in d.scrape_targets() if t.host.startswith("spark-")]


def test_prometheus_config_scrapes_the_spark_master_and_workers() -> None:
    assert {t.host for t in SPARK_TARGETS} == {"spark-master", "spark-worker"}


@pytest.mark.parametrize("target", SPARK_TARGETS, ids=lambda t: t.job)
def test_every_spark_scrape_path_serves_prometheus_text(
        spark_cluster: dict[str, int], target: d.ScrapeTarget) -> None:
    url = f"http://127.0.0.1:{spark_cluster[target.host]}{target.metrics_path}"
    families = poll_until(lambda: _families(scrape(url)), 30.0, 1.0)
    assert families and len(families) > 10, f"{target.job}: no Prometheus text at {url}"
    text = scrape(url) or ""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: `./dev setup` installs Debian's prometheus package"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
    # 3 is lint only (Spark's camelCase names, no HELP lines); 1 would be text that does not parse.
    assert check.returncode in (0, 3), check.stdout[-2000:] + check.stderr[-2000:]
