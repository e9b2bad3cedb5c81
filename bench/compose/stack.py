"""docker-compose.yml brought up in a Docker engine with the stand-ins, and taken down.

Owns the services it runs, the host ports they publish, `Compose` (the `docker compose`
command on one project) and `up` (engine, images, services, then everything down with its
volumes). Neighbours: `engine` and `images` below it; `tests/containers` and
`bench.containers` above it.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.request import urlopen

from bench.compose.engine import Engine, EngineError, compose_binary, engine
from bench.compose.images import ROOT, build_all
from schemas import auth
from streamctl.stack.tcp import port_in_use
from streamctl.stack.waiting import poll_until

SERVICES = ("kafka", "topics", "spark-master", "spark-worker", "job", "job-standby",
            "controller", "controller-2", "prometheus")
"""Every service of docker-compose.yml but Grafana (no stand-in) and the demo's load."""
HOST_PORTS = (9092, 8080, 9301, 9302, 9300, 9303, 9090)
BOOTSTRAP = "127.0.0.1:9092"  # the broker's HOST listener, published on loopback
QUERY, INPUT = "sensor-averages", "sensor-readings"
"""docker-compose.yml's query and its input topic."""
SERVICE_OF = {"sensor-averages-1": "job", "sensor-averages-2": "job-standby"}
"""docker-compose.yml's instance ids → their services."""
FILES = (ROOT / "docker-compose.yml", ROOT / "bench/compose/standins.yml")


@dataclass(frozen=True)
class Compose:
    """`docker compose` on one project, with the files and the `standby` profile."""

    binary: Path
    engine: Engine
    project: str
    env: Mapping[str, str]

    def __call__(self, *args: str, timeout_s: float = 600,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        files = [a for f in FILES for a in ("-f", str(f))]
        proc = subprocess.run(
            [str(self.binary), "-p", self.project, *files, "--profile", "standby", *args],
            cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False,
            env={**os.environ, **self.engine.env, **self.env})
        if check and proc.returncode != 0:
            raise EngineError(f"docker compose {' '.join(args)} exited {proc.returncode}:\n"
                              f"{(proc.stdout + proc.stderr)[-3000:]}")
        return proc

    def state(self, service: str) -> list[str]:
        """Each container's state of `service` (running, exited …), with its exit code."""
        return self("ps", "-a", "--format", "{{.State}} {{.ExitCode}}", service).stdout.splitlines()

    def container(self, service: str) -> str:
        """The id of `service`'s one running container."""
        [container] = self("ps", "-q", service).stdout.split()
        return container

    def restart_count(self, container: str) -> int:
        """How often the engine restarted `container` (its restart policy at work)."""
        return int(self._inspect(container, "{{.RestartCount}}"))

    def crash(self, container: str) -> int:
        """SIGKILL to the container's main process from the host, as a crash would end it
        (`docker kill` counts as a stop asked for, which no restart policy answers); when it
        was sent, in ms since the epoch."""
        pid = int(self._inspect(container, "{{.State.Pid}}"))
        sent_ms = int(time.time() * 1000)
        try:
            os.kill(pid, signal.SIGKILL)
        except PermissionError:  # the engine's processes are root's; sudo, then
            subprocess.run(["sudo", "-n", "kill", "-9", str(pid)], check=True, timeout=30)
        return sent_ms

    def _inspect(self, container: str, template: str) -> str:
        return self.engine.docker("inspect", "-f", template, container).stdout.strip()


@contextmanager
def up(timings: dict[str, float]) -> Iterator[Compose]:
    """Every service of `SERVICES` up, the broker healthy and the job running on the cluster
    with its executors; down with its volumes on the way out, the last 200 lines of each
    service's log kept in the temporary directory as `<project>.log`. `timings` gets how long
    the build and each stage took, in seconds."""
    busy = [p for p in HOST_PORTS if port_in_use(p)]
    if busy:
        raise EngineError(f"the compose stack publishes these ports on 127.0.0.1 and they are in"
                          f" use: {busy} (a local `streamctl stack up`?)")
    with engine() as docker, tempfile.TemporaryDirectory(prefix="streamctl-compose-") as tmp:
        started = time.monotonic()
        binary = compose_binary()
        build_all(docker)
        timings["build (base, image, stand-ins)"] = time.monotonic() - started
        key = auth.ensure_key_file(Path(tmp) / "control.key")
        key.chmod(0o644)  # read by the containers' unprivileged user through a bind mount
        compose = Compose(binary, docker, f"streamctl-check-{uuid.uuid4().hex[:8]}",
                          {"STREAMCTL_CHECK_CONTROL_KEY": str(key)})
        try:
            started = time.monotonic()
            compose("up", "-d", "--no-build", *SERVICES, timeout_s=900)
            _wait(lambda: compose("ps", "--format", "{{.Health}}", "kafka").stdout.split()
                  == ["healthy"], 300, "the broker's healthcheck to pass")
            timings["up → broker healthy"] = time.monotonic() - started
            _wait(_job_has_executors, 300, "the job's application with its executors")
            timings["up → job running on the cluster"] = time.monotonic() - started
            yield compose
        finally:
            try:
                logs = compose("logs", "--no-color", "--tail", "200", check=False).stdout
                (Path(tmp).parent / f"{compose.project}.log").write_text(logs)
            finally:
                compose("down", "--volumes", "--remove-orphans", "--timeout", "20", check=False)


def master_state() -> Any:
    """The Spark master's JSON state (its web UI port, published on loopback), or None while
    it does not answer."""
    try:
        with urlopen("http://127.0.0.1:8080/json/", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, http.client.HTTPException, ValueError):
        return None


def _job_has_executors() -> bool:
    state = master_state()
    return state is not None and any(app["cores"] >= 2 for app in state["activeapps"])


def _wait(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    if poll_until(lambda: True if done() else None, timeout_s, 2) is None:
        raise EngineError(f"timed out after {timeout_s:.0f} s waiting for {what}")
