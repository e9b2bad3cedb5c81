"""The images docker-compose.yml runs here, built with nothing pulled.

Owns the base (a Debian bookworm root file system made with `debootstrap --variant=minbase`
from the Debian mirror this machine's apt names, imported with `docker import`), the project
image built from the repository's own Dockerfile on that base, and the stand-ins for the
official images (standins/Dockerfile). The builds reach packages only through this machine:
the project's wheels (`pip wheel` from the project's venv, cached) and this machine's Maven
cache, served over HTTP on the Docker bridge's own address for the build's pip and mvn.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.compose.engine import CACHE, Engine, EngineError

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "streamctl-base:bookworm"
APP_IMAGE = "streamctl:0.1.0"  # docker-compose.yml's image: compose runs it without building
JARS_IMAGE = "streamctl-jars:check"
STANDINS = {service: f"streamctl-standin-{service}:check"
            for service in ("kafka", "spark-master", "prometheus")}
# What the Dockerfile's and the stand-ins' apt steps would install, so that they skip apt.
BASE_PACKAGES = ("python3", "python3-venv", "openjdk-17-jre-headless", "maven", "prometheus",
                 "ca-certificates", "procps")


def _apt_mirror() -> str:
    """The Debian mirror this machine's apt sources name for bookworm's main archive (deb822
    stanzas or one-line entries; security and third-party archives left out)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for source in (f for f in files if f.is_file()):
        for uri, suites in _apt_entries(source.read_text()):
            if "bookworm" in suites and "security" not in uri:
                return uri
    raise EngineError("no Debian bookworm mirror in /etc/apt/sources*: debootstrap needs one")


def _apt_entries(text: str) -> list[tuple[str, list[str]]]:
    """(URI, suites) of each entry of an apt sources file."""
    entries = []
    for stanza in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in stanza.splitlines()
                      if ":" in line and not line.startswith(("#", " ")))
        if "URIs" in fields:
            entries += [(uri, fields.get("Suites", "").split()) for uri in fields["URIs"].split()]
    for line in text.splitlines():
        words = re.sub(r"\[[^]]*\]", "", line).split()  # options: [arch=… signed-by=…]
        if words[:1] == ["deb"] and len(words) >= 3:
            entries.append((words[1], words[2:3]))
    return entries


def base_image(engine: Engine) -> None:
    """`BASE_IMAGE`, made once: debootstrap into the cache, then `docker import`."""
    if engine.docker("image", "inspect", BASE_IMAGE, check=False).returncode == 0:
        return
    packages = hashlib.sha256(" ".join(BASE_PACKAGES).encode()).hexdigest()[:8]
    rootfs = CACHE / f"base-rootfs-{packages}"
    if not (rootfs / "usr/bin/java").exists():
        if shutil.which("debootstrap") is None:
            raise EngineError("making the base needs Debian's debootstrap "
                              "(`./dev test-containers` installs it)")
        shutil.rmtree(rootfs, ignore_errors=True)
        made = subprocess.run(["debootstrap", "--variant=minbase",
                               f"--include={','.join(BASE_PACKAGES)}", "bookworm", str(rootfs),
                               _apt_mirror()], capture_output=True, text=True, timeout=1800,
                              check=False)
        if made.returncode != 0:
            raise EngineError(f"debootstrap into {rootfs} failed (exit {made.returncode}):\n"
                              f"{(made.stdout + made.stderr)[-3000:]}")
        for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
    # Streamed: the root file system is most of a gigabyte.
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    try:
        engine.docker("import", "-", BASE_IMAGE, stdin=tar.stdout)
    finally:
        tar.wait()


def wheelhouse() -> Path:
    """Wheels of the project's dependencies and of its build backend, for the image's pip."""
    house = CACHE / "wheelhouse"
    house.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(house),
                    str(ROOT), "setuptools>=77", "wheel"], check=True, timeout=1800)
    for own in house.glob("streamctl-*.whl"):
        own.unlink()  # the image builds the project from its sources
    return house


@contextmanager
def package_server(engine: Engine) -> Iterator[dict[str, str]]:
    """An HTTP server on the bridge's address with `/wheels/` and `/maven/` (this machine's
    Maven cache); yields the build arguments that point the image's pip and mvn at it."""
    with tempfile.TemporaryDirectory(prefix="streamctl-packages-") as tmp:
        served = Path(tmp)
        (served / "wheels").symlink_to(wheelhouse())
        (served / "maven").symlink_to(Path.home() / ".m2" / "repository")
        handler = functools.partial(_QuietHandler, directory=str(served))
        server = http.server.ThreadingHTTPServer((engine.bridge_gateway, 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        url = f"http://{engine.bridge_gateway}:{server.server_address[1]}"
        try:
            yield {"BASE_IMAGE": BASE_IMAGE, "PIP_NO_INDEX": "1",
                   "PIP_FIND_LINKS": f"{url}/wheels/", "PIP_TRUSTED_HOST": engine.bridge_gateway,
                   "MAVEN_MIRROR_URL": f"{url}/maven"}
        finally:
            server.shutdown()
            server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def build_all(engine: Engine) -> None:
    """The base, the project image (and its jars stage), and the stand-ins."""
    base_image(engine)
    with package_server(engine) as build_args:
        flags = [arg for k, v in build_args.items() for arg in ("--build-arg", f"{k}={v}")]
        engine.docker("build", "-q", *flags, "--target", "jars", "-t", JARS_IMAGE, str(ROOT),
                      timeout_s=1800)
        engine.docker("build", "-q", *flags, "-t", APP_IMAGE, str(ROOT), timeout_s=1800)
    standins = str(ROOT / "bench/compose/standins/Dockerfile")
    for target, tag in STANDINS.items():
        engine.docker("build", "-q", "-f", standins, "--target", target,
                      "--build-arg", f"JARS_IMAGE={JARS_IMAGE}",
                      "--build-arg", f"APP_IMAGE={APP_IMAGE}",
                      "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-t", tag, str(ROOT))
