"""The loop's probes of the broker: the end offsets of every source partition the queries read.

Owns when to probe (at most once per `probe_interval_s`, and how long a cycle may wait for
metrics before the next probe is due), asking the broker through `ports.OffsetProbe`, the
log of recent probes, which of them the model may use, and saying when the broker stops or
starts answering again. The probes themselves are `core.probes`'. Neighbours: `cycle` (asks
each cycle), `core.model` and `core.outage` (read the fresh probes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from controller.core.probes import EndOffsets, ProbeLog, Wanted, end_offsets
from controller.errors import TemporaryError
from controller.loop.ports import Clock, LoopObserver, OffsetProbe
from controller.settings import ControllerSettings
from schemas import TaskMetrics

log = logging.getLogger("controller")


class Prober:
    def __init__(self, settings: ControllerSettings, offsets: OffsetProbe | None,
                 clock: Clock, observer: LoopObserver) -> None:
        self._settings, self._offsets = settings, offsets
        self._clock, self._observer = clock, observer
        self._log = ProbeLog(settings.model.window_s)
        self._wanted = Wanted()
        self._next_ms = 0
        self._failing = False

    def poll_timeout_s(self) -> float:
        """`poll_timeout_s`, or less when the next probe is due sooner: a cycle that waited
        the whole timeout for metrics would probe up to that much late, and the probes'
        spacing is what times the arrivals."""
        wait_s = self._settings.poll_timeout_s
        if self._offsets is None or self._settings.probe_interval_s <= 0:
            return wait_s
        due_in_s = (self._next_ms - self._clock.now_ms()) / 1000
        return min(wait_s, max(0.0, due_in_s))

    def probe(self, now_ms: int, newest: Iterable[TaskMetrics]) -> None:
        """Ask the broker for the end offsets of every source partition the queries' newest
        samples name, at most once per `probe_interval_s`; a failure is logged when it starts
        and when it ends."""
        interval_s = self._settings.probe_interval_s
        if self._offsets is None or interval_s <= 0 or now_ms < self._next_ms:
            return
        self._next_ms = now_ms + int(interval_s * 1000)
        partitions = self._wanted.of(newest)
        if not partitions:
            return
        try:
            found = self._offsets.end_offsets(partitions)
        except TemporaryError as exc:
            self._observer.probe_failed()
            if not self._failing:
                log.warning("cannot probe the source partitions' end offsets (%s); deciding "
                            "from the batches alone until the broker answers", exc)
            self._failing = True
            return
        if self._failing:
            log.info("the broker answers end-offset probes again")
        self._failing = False
        self._log.add(end_offsets(now_ms, found))

    def fresh(self, now_ms: int) -> tuple[EndOffsets, ...]:
        """The probes the model may use: none when the newest is older than three intervals
        and a cycle (the broker stopped answering)."""
        settings = self._settings
        return self._log.fresh(now_ms, 3 * settings.probe_interval_s + settings.poll_timeout_s)
