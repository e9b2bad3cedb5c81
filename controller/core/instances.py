"""Every instance of every query the controller has heard from: its role and when it last spoke.

The sliding windows (`window`) keep only the active instance's samples, for the model; this
keeps one line per instance, standbys included, for the failover decision (`failover`): which
standbys are alive and could be promoted. Pure and deterministic: samples and `now_ms` in.
Instances silent for `forget_after_s` are dropped, which bounds it (queries are bounded by
`ModelSettings.max_queries` upstream). Neighbours: `loop` feeds it and asks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas import Role, TaskMetrics


@dataclass(frozen=True, slots=True)
class Seen:
    """The newest thing one instance said."""

    instance_id: str
    role: Role
    last_seen_ms: int


class Instances:
    def __init__(self) -> None:
        self._by_query: dict[str, dict[str, Seen]] = {}

    def add(self, sample: TaskMetrics) -> None:
        """Note what an instance said; one that stopped on purpose is gone from here on (a
        stopped standby cannot be promoted)."""
        known = self._by_query.setdefault(sample.query_id, {})
        old = known.get(sample.instance_id)
        if old is not None and old.last_seen_ms > sample.batch_end_ms:
            return  # an older record arriving late says nothing new
        if sample.stopped:
            known.pop(sample.instance_id, None)
            return
        known[sample.instance_id] = Seen(sample.instance_id, sample.role, sample.batch_end_ms)

    def promoted(self, query_id: str, instance_id: str, now_ms: int) -> None:
        """A promotion was acknowledged: the instance is active before its metrics say so."""
        self._by_query.setdefault(query_id, {})[instance_id] = Seen(
            instance_id, Role.ACTIVE, now_ms)

    def live_standbys(self, query_id: str, now_ms: int, timeout_s: float) -> list[Seen]:
        """Standbys heard from within `timeout_s`, freshest first (ties by id)."""
        horizon = now_ms - int(timeout_s * 1000)
        found = [s for s in self._by_query.get(query_id, {}).values()
                 if s.role is Role.STANDBY and s.last_seen_ms >= horizon]
        return sorted(found, key=lambda s: (-s.last_seen_ms, s.instance_id))

    def standbys_heard(self, query_id: str) -> int:
        """How many standbys of the query were heard from, live or silent (not forgotten)."""
        return sum(s.role is Role.STANDBY for s in self._by_query.get(query_id, {}).values())

    def forget(self, query_id: str) -> None:
        self._by_query.pop(query_id, None)

    def queries(self) -> list[str]:
        return sorted(self._by_query)

    def prune(self, now_ms: int, forget_after_s: float) -> None:
        horizon = now_ms - int(forget_after_s * 1000)
        for query_id, known in list(self._by_query.items()):
            for instance_id in [i for i, s in known.items() if s.last_seen_ms < horizon]:
                del known[instance_id]
            if not known:
                del self._by_query[query_id]
