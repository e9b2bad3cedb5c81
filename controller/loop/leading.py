"""Whether this controller instance leads, and the two moments that change it.

Owns the lead: asked each cycle of the `ports.Leadership` port (none: this instance leads
alone, from the start), the takeover when it is elected (fence the earlier leaders, resume
what they left in flight and recount the standbys they lost, then a `takeover` record) and
the hand-over when it is not (stop writing at once, keep only what a follower may know).
Neighbours: `cycle` (asks `this_cycle`, steps down when a write was fenced), `memory` (the
control states resumed and handed over), `actuate` (writes the takeover record).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controller.core.failover import Standbys
from controller.core.recovery import following, resumed
from controller.errors import TemporaryError
from controller.explain import report
from controller.loop.actuate import Actuator
from controller.loop.memory import Memory
from controller.loop.ports import Leadership, LoopObserver

log = logging.getLogger("controller")


class Lead:
    def __init__(self, instance_id: str, leadership: Leadership | None, observer: LoopObserver,
                 actuator: Actuator, new_id: Callable[[], str]) -> None:
        self._instance_id, self._leadership = instance_id, leadership
        self._observer, self._actuator, self._new_id = observer, actuator, new_id
        self.leading = leadership is None

    def announce(self, now_ms: int) -> None:
        """Say at start whether this instance leads (once)."""
        self._observer.leadership(self._instance_id, self.leading, now_ms)

    def this_cycle(self, now_ms: int, memory: Memory, standbys: Standbys) -> bool:
        """Whether this instance leads this cycle: elected since the last one, it first
        takes over."""
        if self._leadership is None:
            return True
        holds = self._leadership.held()
        if holds and not self.leading:
            self._take_over(self._leadership, now_ms, memory, standbys)
        elif self.leading and not holds:
            self.step_down(now_ms, "the lease passed to another instance", memory)
        return self.leading

    def _take_over(self, leadership: Leadership, now_ms: int, memory: Memory,
                   standbys: Standbys) -> None:
        try:
            recovered = leadership.take_over(now_ms)
        except TemporaryError as exc:
            log.warning("elected leader, but cannot take over yet (%s); trying again next "
                        "cycle", exc)
            return
        for query_id in memory.keys() | recovered.states.keys():
            query = memory.of(query_id)
            query.state = resumed(query.state, recovered.states.get(query_id))
            query.verdict = None  # what it concluded while following is said anew
        for query_id, recorded in recovered.remembered.items():
            query = memory.of(query_id)
            query.remembered = query.remembered.with_recorded(recorded)
        for query_id, instance_id in recovered.promoted.items():
            standbys.promoted(query_id, instance_id, now_ms)  # as if it saw the ack
        self.leading = True
        for line in recovered.summary:
            log.info("resuming %s", line)
        log.info("leading from now on (instance %s)", self._instance_id)
        self._observer.leadership(self._instance_id, True, now_ms)
        self._actuator.write(report.takeover_record(
            self._instance_id, decision_id=self._new_id(), now_ms=now_ms,
            resumed=recovered.summary))
        standbys.recount_from_last_standbys()

    def step_down(self, now_ms: int, why: str, memory: Memory) -> None:
        """Stop writing at once: what this instance did is the next leader's to resume."""
        log.warning("no longer leading: %s", why)
        self.leading = False
        for query in memory.values():
            query.state = following(query.state)
        self._observer.leadership(self._instance_id, False, now_ms)
        if self._leadership is not None:
            self._leadership.release()
