"""Child processes the demo and the end-to-end tests start: the job and the controller.

Each child is `python -m streamctl …` in its own session (so a Ctrl-C in the terminal reaches
only the parent, which then stops the children), with its output in a log file. A
parent that takes SIGTERM the same way (`sigterm_as_interrupt`: the demo, the benchmarks, the
test suite) stops them on that too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
"""What `signal.signal` takes and returns."""


def interrupt_on_sigterm() -> Handler:
    """From now on SIGTERM (a supervisor, `timeout`, `kill`, a CI job's end) takes the same
    path as Ctrl-C, so whatever started children stops them on the way out: they run in their
    own sessions and would otherwise outlive it, a broker or a Spark JVM each. Returns the
    handler it replaced."""
    return signal.signal(signal.SIGTERM, _interrupt)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """`interrupt_on_sigterm` while the block runs."""
    previous = interrupt_on_sigterm()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes]

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def kill(self) -> None:
        """SIGKILL to the child's whole session (Spark's JVM included): a crash, no cleanup."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def pause(self) -> None:
        """SIGSTOP to the child's session: frozen as by a long GC pause or a network cut."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (the child shuts down cleanly), SIGKILL if it has not exited in time."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)  # a paused child cannot exit
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if not self._log.closed:
            self._log.close()
        return self.process.returncode


def start_child(name: str, args: Sequence[str], log_dir: Path,
                env: Mapping[str, str] | None = None, cwd: Path | None = None,
                prefix: Sequence[str] = ()) -> Child:
    """`python -m streamctl args`, after `prefix` if given (a command that execs the rest,
    e.g. `ip netns exec <ns>`, so the child's pid stays the program's)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log = log_path.open("wb")
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "streamctl", *args],
        stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True, cwd=cwd,
    )
    return Child(name, process, log_path, log)


def stop_all(children: Sequence[Child], timeout_s: float = 30.0) -> None:
    """Each child stopped as `Child.stop` does, all at once: Spark jobs and controllers shut
    down side by side (one after another, the wait was each one's shutdown in turn)."""
    if children:
        with ThreadPoolExecutor(len(children)) as pool:
            list(pool.map(lambda child: child.stop(timeout_s), children))
