"""Which shards of the queries this controller instance leads, and the moments that change it.

Owns the lead: asked each cycle of the `ports.Leadership` port (none: this instance leads
every query alone, from the start), the takeover of shards it is given (fence their earlier
leaders, resume what they left in flight and recount the standbys they lost, then a
`takeover` record), the hand-over of shards taken from it (stop writing for them at once,
keep only what a follower may know), and which shards' metrics are read (`read`: only the led
ones' when the metrics topic divides into the shards). `leads` says whether a query is this
instance's to write for (`core.shards`). Neighbours: `cycle` (asks `this_cycle` and `leads`,
steps down when a write was fenced, forgets the queries no longer read), `memory` (the control
states resumed and handed over), `actuate` (writes the takeover record).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controller.core.failover import Standbys
from controller.core.recovery import following, resumed
from controller.core.shards import describe, shard_of
from controller.errors import TemporaryError
from controller.explain import report
from controller.loop.actuate import Actuator
from controller.loop.memory import Memory
from controller.loop.ports import Leadership, LoopObserver, MetricsSource

log = logging.getLogger("controller")


class Lead:
    def __init__(self, instance_id: str, leadership: Leadership | None,
                 observer: LoopObserver, actuator: Actuator, new_id: Callable[[], str]) -> None:
        shards = 1 if leadership is None else leadership.shards
        self._instance_id, self._shards, self._leadership = instance_id, shards, leadership
        self._observer, self._actuator, self._new_id = observer, actuator, new_id
        self.held: frozenset[int] = (frozenset(range(shards)) if leadership is None
                                     else frozenset())
        """The shards this instance leads (has taken over and not lost since)."""
        self._reading: frozenset[int] | None = None
        """The shards the metrics source was last told to read (`read`)."""
        self.divided = False
        """Whether the metrics source reads only the led shards' queries."""

    @property
    def shards(self) -> int:
        """How many shards the queries are divided into."""
        return self._shards

    @property
    def leading(self) -> bool:
        """Whether it leads any shard."""
        return bool(self.held)

    def leads(self, query_id: str) -> bool:
        """Whether the query is this instance's to decide and write for."""
        return len(self.held) == self._shards or shard_of(query_id, self._shards) in self.held

    def reads(self, query_id: str) -> bool:
        """Whether the query's metrics are read: every query's where the source does not
        divide, else those of the shards it was told of (`read`), not yet those of a shard
        taken over this cycle."""
        return not self.divided or shard_of(query_id, self._shards) in (self._reading or ())

    def read(self, metrics: MetricsSource, now_ms: int) -> bool:
        """Tell the metrics source which shards this instance leads, when that changed since
        it last did; whether the queries of other shards are no longer read from now on (a
        source that divides reads only the led shards', the shards gained from the window
        back), so the caller forgets them."""
        if self.held == self._reading:
            return False
        try:
            self.divided = metrics.read_shards(self.held, self._shards, now_ms)
        except TemporaryError as exc:
            log.warning("cannot read the metrics of %s yet (%s); trying again next cycle",
                        describe(self.held, self._shards), exc)
            return False
        self._reading = self.held
        if self.divided:
            log.info("reading the metrics of %s only", describe(self.held, self._shards))
        return self.divided

    def announce(self, now_ms: int) -> None:
        """Say at start how many shards this instance leads (once)."""
        self._observer.leadership(self._instance_id, len(self.held), self._shards, now_ms)

    def this_cycle(self, now_ms: int, memory: Memory, standbys: Standbys) -> None:
        """Hand over the shards taken from this instance since the last cycle, take over the
        ones given to it."""
        if self._leadership is None:
            return
        holds = self._leadership.held()
        lost = self.held - holds
        if lost:
            self._hand_over(lost, now_ms, memory)
        gained = holds - self.held
        if gained:
            self._take_over(self._leadership, gained, now_ms, memory, standbys)

    def _take_over(self, leadership: Leadership, gained: frozenset[int], now_ms: int,
                   memory: Memory, standbys: Standbys) -> None:
        try:
            recovered = leadership.take_over(gained, now_ms)
        except TemporaryError as exc:
            log.warning("given %s, but cannot take over yet (%s); trying again next cycle",
                        describe(gained, self._shards), exc)
            return
        self.held |= gained
        ours = [q for q in memory if shard_of(q, self._shards) in gained]
        for query_id in {*ours, *recovered.states}:
            query = memory.of(query_id)
            query.state = resumed(query.state, recovered.states.get(query_id))
            query.verdict = None  # what it concluded while following is said anew
        for query_id, recorded in recovered.remembered.items():
            query = memory.of(query_id)
            query.remembered = query.remembered.with_recorded(recorded)
        for query_id, instance_id in recovered.promoted.items():
            standbys.promoted(query_id, instance_id, now_ms)  # as if it saw the ack
        for line in recovered.summary:
            log.info("resuming %s", line)
        led = describe(self.held, self._shards)
        log.info("leading %s from now on (instance %s)", led, self._instance_id)
        self._observer.leadership(self._instance_id, len(self.held), self._shards, now_ms)
        self._actuator.write(report.takeover_record(
            self._instance_id, decision_id=self._new_id(), now_ms=now_ms,
            resumed=recovered.summary, gained=gained, shards=self._shards))
        standbys.recount_from_last_standbys(lambda q: shard_of(q, self._shards) in gained)

    def _hand_over(self, lost: frozenset[int], now_ms: int, memory: Memory) -> None:
        """Stop writing for `lost` at once: what this instance did there is the next
        leader's to resume."""
        log.warning("no longer leading %s: the lease passed to another instance",
                    describe(lost, self._shards))
        self.held -= lost
        for query_id, query in memory.items():
            if shard_of(query_id, self._shards) in lost:
                query.state = following(query.state)
        self._observer.leadership(self._instance_id, len(self.held), self._shards, now_ms)
        if self._leadership is not None:
            self._leadership.give_up(lost)

    def step_down(self, now_ms: int, why: str, memory: Memory) -> None:
        """Stop writing for every shard at once and rejoin: what this instance did is the
        next leaders' to resume."""
        log.warning("no longer leading: %s", why)
        self.held = frozenset()
        for query in memory.values():
            query.state = following(query.state)
        self._observer.leadership(self._instance_id, 0, self._shards, now_ms)
        if self._leadership is not None:
            self._leadership.release()
