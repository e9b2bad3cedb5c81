"""A page as a person sees it: Debian's Chromium, headless, loads it, runs its script, and
gives back the rendered DOM and a screenshot.

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


def rendered(url: str, screenshot: Path, script_ms: int = 6000, timeout_s: float = 90) -> str:
    """The DOM of `url` once its script ran for `script_ms` of virtual time; the page as
    drawn right after is saved to `screenshot` (PNG)."""
    sandbox = ("--no-sandbox",) if os.geteuid() == 0 else ()
    with tempfile.TemporaryDirectory(prefix="streamctl-chromium-") as profile:
        common = [chromium(), *FLAGS, *sandbox, f"--user-data-dir={profile}",
                  f"--virtual-time-budget={script_ms}"]
        dom = subprocess.run([*common, "--dump-dom", url], check=True, capture_output=True,
                             text=True, timeout=timeout_s).stdout
        subprocess.run([*common, f"--screenshot={screenshot}", url], check=True,
                       capture_output=True, timeout=timeout_s)
        return dom
