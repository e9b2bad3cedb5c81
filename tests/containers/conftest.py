"""The container tier: docker-compose.yml run for real, in containers, on this machine.

`compose_stack` (one per module) starts the engine if none runs, builds the base, the project
image and the stand-ins (images.py), brings up every service that runs the project image plus
the stand-ins (compose.standins.yml), and takes it all down, volumes included, on the way out.
Run with `./dev test-containers`; `./dev test` leaves this directory out.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from schemas import auth
from streamctl.stack.tcp import port_in_use
from tests.containers.engine import Engine, compose_binary, engine
from tests.containers.images import ROOT, build_all
from tests.support.prometheus import scrape
from tests.support.waiting import until

SERVICES = ("kafka", "topics", "spark-master", "spark-worker", "job", "job-standby",
            "controller", "controller-2", "prometheus")
"""Every service of docker-compose.yml but Grafana (no stand-in) and the demo's load."""
HOST_PORTS = (9092, 8080, 9301, 9302, 9300, 9303, 9090)
BOOTSTRAP = "127.0.0.1:9092"  # the broker's HOST listener, published on loopback
FILES = (ROOT / "docker-compose.yml", ROOT / "tests/containers/compose.standins.yml")


@dataclass(frozen=True)
class Compose:
    """`docker compose` on the check's project, files and profile."""

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
            raise AssertionError(f"docker compose {' '.join(args)} exited {proc.returncode}:\n"
                                 f"{(proc.stdout + proc.stderr)[-3000:]}")
        return proc

    def state(self, service: str) -> list[str]:
        """Each container's state of `service` (running, exited …), with its exit code."""
        return self("ps", "-a", "--format", "{{.State}} {{.ExitCode}}", service).stdout.splitlines()


@dataclass
class Timings:
    """What the check measured, printed at the end."""

    figures: dict[str, float]

    def report(self) -> str:
        return "\n".join(f"  {name:<36} {seconds:7.1f} s" for name, seconds in self.figures.items())


@pytest.fixture(scope="module")
def timings() -> Iterator[Timings]:
    t = Timings({})
    yield t
    print("\ncontainer check timings:\n" + t.report())


@pytest.fixture(scope="module")
def compose_stack(timings: Timings) -> Iterator[Compose]:
    busy = [p for p in HOST_PORTS if port_in_use(p)]
    assert not busy, (f"the compose stack publishes these ports on 127.0.0.1 and they are in use:"
                      f" {busy} (a local `streamctl stack up`?)")
    with engine() as docker, tempfile.TemporaryDirectory(prefix="streamctl-check-") as tmp:
        started = time.monotonic()
        binary = compose_binary()
        build_all(docker)
        timings.figures["build (base, image, stand-ins)"] = time.monotonic() - started
        key = auth.ensure_key_file(Path(tmp) / "control.key")
        key.chmod(0o644)  # read by the containers' unprivileged user through a bind mount
        compose = Compose(binary, docker, f"streamctl-check-{uuid.uuid4().hex[:8]}",
                          {"STREAMCTL_CHECK_CONTROL_KEY": str(key)})
        try:
            started = time.monotonic()
            compose("up", "-d", "--no-build", *SERVICES, timeout_s=900)
            until(lambda: compose("ps", "--format", "{{.Health}}", "kafka").stdout.split()
                  == ["healthy"], 300, "the broker's healthcheck to pass", 2)
            timings.figures["up → broker healthy"] = time.monotonic() - started
            until(_job_has_executors, 300, "the job's application with its executors", 2)
            timings.figures["up → job running on the cluster"] = time.monotonic() - started
            yield compose
        finally:
            logs = compose("logs", "--no-color", "--tail", "200", check=False).stdout
            (Path(tmp).parent / f"{compose.project}.log").write_text(logs)
            compose("down", "--volumes", "--remove-orphans", "--timeout", "20", check=False)



def master_state() -> Any:
    """The Spark master's JSON state (its web UI port, published on loopback), or None while
    it does not answer."""
    text = scrape("http://127.0.0.1:8080/json/")
    return json.loads(text) if text else None


def _job_has_executors() -> bool:
    state = master_state()
    return state is not None and any(app["cores"] >= 2 for app in state["activeapps"])
