"""A page as a person sees it: Debian's Chromium, headless, loads it, runs its script, and
gives back the rendered DOM, or a screenshot.

Chromium runs with a fresh profile and without its background traffic (this machine's network
is closed: its update, sync and lookup requests would fail or wait), and `--no-sandbox` when
run as root, which Chromium's sandbox refuses. `--virtual-time-budget` lets the page's
timers and fetches run before the DOM is taken, without waiting that long in real time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1280,1000")


def chromium() -> str:
    found = shutil.which("chromium")
    assert found, "no chromium: `./dev setup` installs Debian's chromium package"
    return found


def _run(url: str, action: str, script_ms: int, timeout_s: float) -> str:
    sandbox = ("--no-sandbox",) if os.geteuid() == 0 else ()
    with tempfile.TemporaryDirectory(prefix="streamctl-chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, *sandbox, f"--user-data-dir={profile}",
                               f"--virtual-time-budget={script_ms}", action, url], check=True,
                              capture_output=True, text=True, timeout=timeout_s).stdout


def dom(url: str, script_ms: int = 6000, timeout_s: float = 90) -> str:
    """The DOM of `url` once its script ran for `script_ms` of virtual time."""
    return _run(url, "--dump-dom", script_ms, timeout_s)


def screenshot(url: str, path: Path, script_ms: int = 6000, timeout_s: float = 90) -> None:
    """`url` as drawn once its script ran for `script_ms` of virtual time, to `path` (PNG)."""
    _run(url, f"--screenshot={path}", script_ms, timeout_s)
