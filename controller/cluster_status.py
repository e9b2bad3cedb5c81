"""The shared Spark cluster's free cores, read from its standalone master's status.

`MasterStatus` reads the master's JSON status (its web UI's `/json/`) every interval in a
thread of its own, and a collection time after a query comes to want cores (`read_soon`), so
that the loop's `free_cores` returns at once: the free cores of the
live workers (`coresfree` of each worker whose state is ALIVE) as last read. Summed over the
workers: an executor of several cores needs them on one worker, so with such executors the
sum may promise room that is split across workers. It gives None
before the first good read and once the last good one is three intervals old, so a master
that cannot be read leaves every job to ask on its own, as without it. A standby master of
a high-availability pair says so (`status` STANDBY) and is not used. It logs when reading
starts failing and when it works again, once each. Neighbours: `loop.ports.ClusterStatus`,
`app` (wires it when `spark_master_status_url` is set), `core.cluster` (divides it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from http.client import HTTPException
from typing import Any

from controller.errors import ControllerError

log = logging.getLogger("controller.cluster")

STALE_AFTER_INTERVALS = 3
"""Reads after which a reading is no longer used when none since succeeded."""


class StatusError(ControllerError, ValueError):
    """The master's status says nothing about free cores this controller can use."""


def free_cores_of(status: Mapping[str, Any]) -> int:
    """The free cores of the live workers in a standalone master's JSON status."""
    state = status.get("status", "ALIVE")
    if state != "ALIVE":
        raise StatusError(f"the master is {state}, not the alive one of its pair")
    workers = status.get("workers")
    if not isinstance(workers, list):
        raise StatusError("the status has no 'workers' list (not a Spark master's /json/?)")
    try:
        return sum(max(0, int(w["coresfree"])) for w in workers if w.get("state") == "ALIVE")
    except (KeyError, TypeError, ValueError) as exc:
        raise StatusError(f"a worker without a whole 'coresfree' ({exc!r})") from exc


def _fetch(url: str, timeout_s: float) -> Mapping[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        found = json.load(response)
    if not isinstance(found, dict):
        raise StatusError("the status is not a JSON object")
    return found


class MasterStatus:
    """`ports.ClusterStatus` on a Spark standalone master; `start` it, `close` it."""

    def __init__(self, url: str, interval_s: float, collect_s: float | None = None, *,
                 fetch: Callable[[str, float], Mapping[str, Any]] = _fetch,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """Read every `interval_s`, and `collect_s` after a `read_soon` (default: the interval,
        a want waits for the next regular reading). `clock` dates the readings (their age);
        the reading thread waits in real time."""
        self.url, self._interval_s = url, interval_s
        self._collect_s = interval_s if collect_s is None else collect_s
        self._fetch, self._clock = fetch, clock
        self._reading: tuple[int, float] | None = None
        """(free cores, when read) of the last good read."""
        self._begun = 0
        """Reads begun so far."""
        self._readings = 0
        """The ordinal (among the reads begun) of the last good one."""
        self._failing = False
        self._due = 0.0
        """When the next read is due (`time.monotonic`)."""
        self._due_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamctl-cluster-status",
                                        daemon=True)

    def start(self) -> MasterStatus:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=self._interval_s + 5)

    def free_cores(self) -> int | None:
        reading = self._reading
        if reading is None:
            return None
        cores, at = reading
        if self._clock() - at > STALE_AFTER_INTERVALS * self._interval_s:
            return None
        return cores

    def readings(self) -> int:
        return self._readings

    def reads_begun(self) -> int:
        return self._begun

    def read_soon(self) -> None:
        with self._due_lock:
            self._due = min(self._due, time.monotonic() + self._collect_s)
        self._wake.set()

    def read_once(self) -> None:
        """One read of the status; a failure keeps the last reading until it is stale."""
        self._begun += 1
        ordinal = self._begun
        try:
            cores = free_cores_of(self._fetch(self.url, min(self._interval_s, 5.0)))
        except (OSError, ValueError, HTTPException) as exc:  # unreachable, bad JSON or reply
            if not self._failing:
                log.warning("cannot read the Spark master's status at %s (%s); until it can, "
                            "jobs ask for executors on their own", self.url, exc)
            self._failing = True
            return
        if self._failing or self._reading is None:
            log.info("the Spark master's status at %s reads %d free cores", self.url, cores)
        self._failing = False
        self._reading = (cores, self._clock())
        self._readings = ordinal

    def _run(self) -> None:
        while not self._stop.is_set():
            # Due again before the read: a want noted during it (which this reading may
            # divide already) still has a reading after its collection time.
            with self._due_lock:
                self._due = time.monotonic() + self._interval_s
            self.read_once()
            while not self._stop.is_set() and (left := self._due - time.monotonic()) > 0:
                self._wake.wait(left)
                self._wake.clear()
