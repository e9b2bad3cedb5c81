"""A real Prometheus server and promtool (Debian's `prometheus` package, `./dev setup`), for
the deployment tests: check text and configs, run a server on a config, ask its HTTP API."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from streamctl.processes import Child
from streamctl.stack.tcp import find_free_ports
from tests.support.waiting import until


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: `./dev setup` installs Debian's prometheus package"
    return path


def check_metrics(text: str, what: str, *, lint_ok: bool = False) -> None:
    """promtool accepts `text` as Prometheus exposition; with `lint_ok`, lint findings (exit
    3: camelCase names, no HELP lines, as in Spark's own metrics) are accepted too."""
    check = subprocess.run([tool("promtool"), "check", "metrics"], input=text,
                           capture_output=True, text=True, timeout=30)
    accepted = (0, 3) if lint_ok else (0,)
    assert check.returncode in accepted, f"{what}: {check.stdout[-2000:]}{check.stderr[-2000:]}"


def check_config(path: Path) -> None:
    check = subprocess.run([tool("promtool"), "check", "config", str(path)],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


@contextmanager
def running(config: Path, workdir: Path) -> Iterator[str]:
    """A Prometheus server on `config` (checked first), ready; its base URL. Stopped after."""
    check_config(config)
    (port,) = find_free_ports(1)
    log_path = workdir / "prometheus.log"
    log = log_path.open("wb")
    server = subprocess.Popen(
        [tool("prometheus"), f"--config.file={config}",
         f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    child = Child("prometheus", server, log_path, log)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert child.alive(), f"Prometheus exited:\n{child.log_tail()}"
            return scrape(f"{base}/-/ready") is not None

        until(ready, 30.0, "Prometheus ready", 0.5)
        yield base
    finally:
        child.stop(timeout_s=20.0)


def scrape(url: str) -> str | None:
    """The text at `url`, or None while nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except (OSError, http.client.HTTPException):
        return None


def sample(text: str | None, name: str, **labels: str) -> float | None:
    """The value of the first sample `name` carrying `labels`, or None: none there, or text
    that is not Prometheus exposition (Spark's UI answers HTML until its metrics servlets
    are attached)."""
    try:
        for family in text_string_to_metric_families(text or ""):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
    except ValueError:
        return None
    return None


def scraped(port: int, name: str, **labels: str) -> float:
    """A sample of the Prometheus endpoint a local process serves on `port`, now (0 when
    absent)."""
    return sample(scrape(f"http://127.0.0.1:{port}/metrics"), name, **labels) or 0.0


def api(base: str, path: str, **params: str) -> Any:
    """A Prometheus HTTP API answer as JSON (a bad query answers 400 with an error body)."""
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())
