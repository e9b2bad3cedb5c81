"""The Docker engine and Compose the container tier and `bench.containers` run on, started
and built here.

Owns finding a running engine (`DOCKER_HOST`, else the default socket) or starting Debian's
`dockerd` on a socket and data root of the check's own, and stopping only what it started;
and Compose v5 (the Compose users run as `docker compose`), built from its Go module into the
check's cache when absent. The engine is started with `--iptables=false`: containers reach
each other and this machine's bridge address, nothing beyond it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from streamctl.stack.waiting import poll_until

CACHE = Path(os.environ.get("STREAMCTL_CONTAINER_CACHE",
                            Path.home() / ".cache" / "streamctl" / "containers"))
COMPOSE_MODULE = "github.com/docker/compose/v5"
COMPOSE_VERSION = "v5.6.0"  # the newest whose go.mod this machine's Go 1.26.8 satisfies
_DEFAULT_SOCKET = Path("/var/run/docker.sock")


class EngineError(RuntimeError):
    """The engine or Compose could not be had; the message says what to install or fix."""


@dataclass(frozen=True)
class Engine:
    """A reachable Docker engine: `env` points the docker and compose clients at it."""

    env: Mapping[str, str]
    bridge_gateway: str

    def docker(self, *args: str, timeout_s: float = 600, check: bool = True,
               stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess[str]:
        return _run(["docker", *args], self.env, timeout_s, check, stdin)


def _run(cmd: Sequence[str], env: Mapping[str, str], timeout_s: float, check: bool,
         stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess[str]:
    raw = subprocess.run(list(cmd), stdin=stdin, capture_output=True, timeout=timeout_s,
                         env={**os.environ, **env}, check=False)
    proc = subprocess.CompletedProcess(raw.args, raw.returncode,
                                       raw.stdout.decode(errors="replace"),
                                       raw.stderr.decode(errors="replace"))
    if check and proc.returncode != 0:
        raise EngineError(f"`{' '.join(cmd[:4])} …` exited {proc.returncode}:\n"
                          f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


def _answers(env: Mapping[str, str]) -> bool:
    if shutil.which("docker") is None:
        raise EngineError("no docker client on PATH: install Debian's docker.io "
                          "(`./dev test-containers` does)")
    return _run(["docker", "info", "--format", "{{.ServerVersion}}"], env, 20,
                check=False).returncode == 0


def _gateway(env: Mapping[str, str]) -> str:
    out = _run(["docker", "network", "inspect", "bridge"], env, 20, True).stdout
    config = json.loads(out)[0]["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return str(config["Gateway"])
    # Without a gateway in the IPAM config (seen with --iptables=false), the bridge's first
    # address is the host's.
    prefix = config["Subnet"].split("/")[0].rsplit(".", 1)[0]
    return f"{prefix}.1"


@contextmanager
def engine() -> Iterator[Engine]:
    """A running engine: the one `DOCKER_HOST` or the default socket answers on, else a
    `dockerd` started here (and stopped on the way out, with what it ran)."""
    if os.environ.get("DOCKER_HOST") or _DEFAULT_SOCKET.exists():
        env = dict(os.environ)
        if _answers(env):
            yield Engine({}, _gateway(env))
            return
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise EngineError("no Docker engine answers and no dockerd to start: install Debian's "
                          "docker.io (`./dev test-containers` does)")
    root = CACHE / "engine"
    root.mkdir(parents=True, exist_ok=True)
    run_dir = Path("/tmp") / f"streamctl-dockerd-{os.getpid()}"  # a socket path must be short
    run_dir.mkdir(exist_ok=True)
    env = {"DOCKER_HOST": f"unix://{run_dir / 'docker.sock'}"}
    log = (root / "dockerd.log").open("ab")
    proc = subprocess.Popen(
        [dockerd, "--iptables=false", "--host", env["DOCKER_HOST"],
         "--data-root", str(root / "data"), "--exec-root", str(run_dir / "exec"),
         "--pidfile", str(run_dir / "dockerd.pid")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def answering() -> bool | None:
            if proc.poll() is not None:
                raise EngineError(f"dockerd exited; its log: {root / 'dockerd.log'}")
            return _answers(env) or None

        if poll_until(answering, 60, 0.5) is None:
            raise EngineError(f"dockerd did not answer in 60 s; its log: {root / 'dockerd.log'}")
        yield Engine(env, _gateway(env))
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        shutil.rmtree(run_dir, ignore_errors=True)


def compose_binary() -> Path:
    """Compose `COMPOSE_VERSION`, built from its Go module (the Go module proxy) once."""
    binary = CACHE / f"compose-{COMPOSE_VERSION}" / "docker-compose"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise EngineError("building Compose needs Go on PATH")
    listing = _run([go, "mod", "download", "-json", f"{COMPOSE_MODULE}@{COMPOSE_VERSION}"],
                   {}, 600, True).stdout
    source = Path(json.loads(listing)["Dir"])
    # `go install module@version` refuses modules whose go.mod has exclude directives, as
    # Compose's has: build inside a writable copy of the module instead.
    work = binary.parent / "src"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    for path in work.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    version_flag = f"-X {COMPOSE_MODULE}/internal.Version={COMPOSE_VERSION}"
    built = subprocess.run(
        [go, "build", "-trimpath", "-ldflags", version_flag, "-o", str(binary) + ".tmp", "./cmd"],
        cwd=work, timeout=1800, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise EngineError(f"building Compose {COMPOSE_VERSION} failed:\n{built.stderr[-3000:]}")
    Path(str(binary) + ".tmp").replace(binary)
    shutil.rmtree(work, ignore_errors=True)
    return binary
