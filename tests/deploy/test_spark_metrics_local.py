"""The compose file's Spark master and worker, run locally from the pyspark distribution.

E2E tier, no Docker: `spark-master` and `spark-worker` run with their compose `command` and
`environment` (the session's `spark_cluster`: pyspark's own Spark, host names and ports mapped
to loopback, the mounted `deploy/spark/metrics.properties` to the repository's file). Checks
that every
Spark scrape path of `deploy/prometheus.yml` serves Prometheus text, which is what the Spark
panels of a deployment depend on.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy import deployment as d
from tests.support.prometheus import check_metrics, scrape
from tests.support.spark_cluster import LocalSparkCluster
from tests.support.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def _families(text: str | None) -> list[object] | None:
    try:
        return list(text_string_to_metric_families(text)) if text else None
    except ValueError:  # HTML from the UI while the servlets are not attached yet
        return None


SPARK_TARGETS = [t for t in d.scrape_targets() if t.host.startswith("spark-")]


def test_prometheus_config_scrapes_the_spark_master_and_workers() -> None:
    assert {t.host for t in SPARK_TARGETS} == {"spark-master", "spark-worker"}


@pytest.mark.parametrize("target", SPARK_TARGETS, ids=lambda t: t.job)
def test_every_spark_scrape_path_serves_prometheus_text(
        spark_cluster: LocalSparkCluster, target: d.ScrapeTarget) -> None:
    url = f"http://127.0.0.1:{spark_cluster.ui_ports[target.host]}{target.metrics_path}"
    families = until(lambda: _families(scrape(url)), 30.0, f"Prometheus text at {url}", 1.0)
    assert len(families) > 10, f"{target.job}: {len(families)} families at {url}"
    # Spark's names are camelCase and carry no HELP lines: promtool's lint findings are
    # accepted; text that does not parse is not.
    check_metrics(scrape(url) or "", target.job, lint_ok=True)
