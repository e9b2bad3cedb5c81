"""The compose file's Spark standalone master and workers, run locally from pyspark's own Spark.

`spark-master` and `spark-worker` run with their compose `command` and `environment` (the
official image's `/opt/spark/bin/spark-class` and the project image's `spark-class` are both
pyspark's own, the same Spark version; host names and ports mapped to loopback and free ports,
the mounted `deploy/spark/metrics.properties` to the repository's file). Each worker gets its
own web UI port and work directory. `LocalSparkCluster.stop` ends every process it started,
the executors the workers launched included. Neighbours: `test_spark_metrics_local` (scrape
paths), `test_compose_local` (the job service on this cluster), `tests/spark/
test_executors_standalone` (the `executors` control tuple), `tests/spark/
test_cluster_division` (two jobs wanting more than the cluster has free).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from controller.cluster_status import MasterStatus
from streamctl.processes import Child
from streamctl.stack.tcp import find_free_ports
from tests.deploy import deployment as d
from tests.support.prometheus import sample, scrape
from tests.support.waiting import until

SPARK_HOME = Path(importlib.util.find_spec("pyspark").origin).parent  # type: ignore[union-attr,arg-type]
STARTUP_BUDGET_S = 150.0
"""Master up and every worker registered: about 30 s on the shared 2-core machine."""


@dataclass
class LocalSparkCluster:
    master_port: int
    ui_ports: dict[str, int]
    """Service instance ('spark-master', 'spark-worker', 'spark-worker-2', ...) -> web UI port."""
    children: list[Child] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def master_metric(self, name: str) -> float | None:
        """A sample of the master's Prometheus text, e.g. metrics_master_aliveWorkers_Value."""
        return sample(scrape(f"http://127.0.0.1:{self.ui_ports['spark-master']}"
                             "/metrics/master/prometheus/"), name)

    def assert_alive(self) -> None:
        for child in self.children:
            assert child.alive(), f"{child.name} exited:\n{child.log_tail()}"

    def logs(self, lines: int = 10) -> str:
        return "\n".join(f"--- {c.name}\n{c.log_tail(lines)}" for c in self.children)

    @contextlib.contextmanager
    def extra_worker(self, tmp: Path, cores: int) -> Iterator[None]:
        """One more worker of `cores` cores while in the block: registered on entry, stopped
        on leaving it and waited for until the master counts it gone, so the tests after
        find the cluster as it was."""
        before = self.master_metric("metrics_master_aliveWorkers_Value")
        assert before is not None, f"the master's metrics did not answer:\n{self.logs()}"
        instance = f"spark-worker-{len(self.ui_ports)}"
        tmp.mkdir(parents=True, exist_ok=True)
        [ui] = find_free_ports(1)
        worker = _start("spark-worker", instance, {**_base(self), "8081": str(ui)}, tmp,
                        {"SPARK_WORKER_CORES": str(cores)})
        try:
            until(lambda: self.master_metric("metrics_master_aliveWorkers_Value") == before + 1,
                  STARTUP_BUDGET_S, f"{instance} registered", 1.0, alive=[worker])
            yield
        finally:
            _end(worker)
            until(lambda: self.master_metric("metrics_master_aliveWorkers_Value") == before,
                  STARTUP_BUDGET_S, f"the master to count {instance} gone", 1.0)

    def stop(self) -> None:
        """Workers first, then the master; anything left in a worker's session (executors
        whose driver did not end them) is killed."""
        for child in reversed(self.children):
            _end(child)


def _end(child: Child) -> None:
    """A master or worker stopped, and anything left in its session (executors whose driver
    did not end them) killed."""
    child.stop(timeout_s=20.0)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.process.pid, signal.SIGKILL)


def await_free_cores(status: MasterStatus, free: int) -> None:
    """The master's status read until it shows `free` cores (it frees a killed executor's
    core when the worker reports it gone)."""
    def shows() -> bool:
        status.read_once()
        return status.free_cores() == free

    until(shows, 60, f"the master's status to show {free} free cores", 1.0)


def _local(text: str, replacements: Mapping[str, str]) -> str:
    for old, new in replacements.items():
        text = text.replace(old, new)
    return text


def _mounts(service: Mapping[str, object]) -> dict[str, str]:
    """Container path -> repository path of a service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):  # type: ignore[attr-defined]
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            mounts[target] = str(d.ROOT / source[2:])
    return mounts


def _start(service_name: str, instance: str, replacements: Mapping[str, str], tmp: Path,
           env_overrides: Mapping[str, str]) -> Child:
    service = d.services()[service_name]
    replacements = {**replacements, **_mounts(service)}
    command = [_local(arg, replacements) for arg in service["command"]]
    command[0] = str(SPARK_HOME / "bin" / "spark-class")
    env = {k: _local(v, replacements) for k, v in d.environment(service).items()}
    env |= {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            # not inside the venv's pyspark
            "SPARK_WORKER_DIR": str(tmp / f"{instance}-work"), **env_overrides}
    log_path = tmp / f"{instance}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    return Child(instance, process, log_path, log)


def _base(cluster: LocalSparkCluster) -> dict[str, str]:
    """The compose file's master address and ports, as this cluster's (`_local`)."""
    return {"spark-master": "127.0.0.1", "7077": str(cluster.master_port),
            "8080": str(cluster.ui_ports["spark-master"])}


def start_cluster(tmp: Path, workers: int = 1,
                  worker_env: Mapping[str, str] | None = None) -> LocalSparkCluster:
    """Master and `workers` workers, waited for until all are registered (or stopped and
    failed). `worker_env` overrides the compose worker environment (e.g. SPARK_WORKER_CORES)."""
    tmp.mkdir(parents=True, exist_ok=True)
    master_port, master_ui, *worker_uis = find_free_ports(2 + workers)
    cluster = LocalSparkCluster(master_port, {"spark-master": master_ui})
    base = _base(cluster)
    try:
        cluster.children.append(_start("spark-master", "spark-master", base, tmp, {}))
        for i, ui in enumerate(worker_uis, start=1):
            instance = "spark-worker" if i == 1 else f"spark-worker-{i}"
            cluster.ui_ports[instance] = ui
            cluster.children.append(_start("spark-worker", instance, {**base, "8081": str(ui)},
                                           tmp, worker_env or {}))

        until(lambda: cluster.master_metric("metrics_master_aliveWorkers_Value") == workers,
              STARTUP_BUDGET_S, f"{workers} Spark workers registered", 1.0,
              alive=cluster.children)
    except BaseException:
        cluster.stop()
        raise
    return cluster
