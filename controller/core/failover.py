"""Failover: from a lost active instance and the live standbys to a promotion, or to advice.

The decision is pure (`decide`, `standby_advice`): the liveness verdict (`judgement.liveness`,
which already holds off while a control tuple is in flight, so a promotion is never repeated
while one waits for its ack) and the standbys heard from recently (`instances`) in, a verdict
out. `Standbys` keeps, per query, the instance table and the last count of live standbys, so
the loop can report the count and ask for a new standby once the last one is gone.

Which standby: the one heard from most recently (ties by instance id, for determinism), the
lost instance itself included when it beats as a standby (its promotion failed after it had
run as the active; `Standbys` holds it off for a while first). The promotion is a control
tuple `active_instance=<id>` with the next epoch, addressed to every instance of the query: the
named one promotes itself, an active that is not named steps down. Neighbours: `loop` (acts on
the verdicts), `instances`, `results`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from controller.core.instances import Instances, Seen
from controller.core.results import Down, Lost, Promote, Recommend
from controller.core.wording import num
from schemas import TaskMetrics

NO_STANDBY = ("; no live standby to fail over to: restart the job, or keep a standby running "
              "(`streamctl job run --role standby`, same query id and checkpoint directory) "
              "so the next loss fails over by itself")


def decide(lost: Lost | Down, standbys: Sequence[Seen], held_off: Sequence[str],
           lost_instance: str, now_ms: int) -> Promote | Lost | Down:
    """Promote the freshest live standby, or report the loss with what to do about it. An
    active that stopped on purpose is replaced like a lost one (a planned stop, say a host
    drained, keeps the query running), but the stop is no loss to advise about; one that
    halted waits for its operator, whom a standby on the same checkpoint would not spare.
    `held_off` says why live standbys left out of `standbys` are not tried now (their
    promotion failed: `Standbys.refused`). The lost instance itself is a candidate when it
    beats as a standby: its promotion failed after it had run as the active, and once its wait
    is over it may be the only one left to try."""
    candidates = list(standbys)
    if isinstance(lost, Down) and (lost.action == "halted" or not candidates):
        return lost
    if not candidates:
        assert isinstance(lost, Lost)
        why = "".join(f"; {note}" for note in held_off) if held_off else NO_STANDBY
        return replace(lost, reason=lost.reason + why)
    chosen = candidates[0]
    age_s = max(0, now_ms - chosen.last_seen_ms) / 1000
    who = f"active instance {lost_instance}" if lost_instance else "the active instance"
    again = " again (it beats as a standby)" if chosen.instance_id == lost_instance else ""
    return Promote(chosen.instance_id, lost_instance, (
        f"{who}: {lost.reason.split(';', 1)[0]}; promoting standby {chosen.instance_id}{again} "
        f"(heartbeat {num(age_s)} s ago, "
        f"{len(candidates)} live standby{'s' if len(candidates) != 1 else ''}): it fences the "
        "former active and resumes from the shared checkpoint"),
        {**lost.figures, "standbys": float(len(candidates)), "standby_age_s": age_s})


def standby_advice(query_id: str, before: int, after: int) -> Recommend | None:
    """Ask for a new standby when the last live one is gone (promoted, or silent)."""
    if before == 0 or after > 0:
        return None
    return Recommend(
        "start_standby", "standby_instances", 1.0,
        f"{query_id} has no live standby left (it had {before}): the next loss of its active "
        "instance cannot fail over; start one (`streamctl job run --role standby`, same query "
        "id and checkpoint directory; compose: the job-standby service)",
        {"standbys_before": float(before), "standbys": 0.0})


RETRY_FIRST_S = 30.0
"""Wait before a standby whose promotion failed is promoted again; doubled each time."""
RETRY_MAX_S = 600.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """A standby's failed promotion: not tried again before `until_ms`."""

    until_ms: int
    failures: int
    why: str

    def describe(self, instance_id: str, now_ms: int) -> str:
        times = "once" if self.failures == 1 else f"{self.failures} times in a row"
        return (f"standby {instance_id} failed its promotion {times} ({self.why}); tried again "
                f"in {num(max(0, self.until_ms - now_ms) / 1000)} s")


class Standbys:
    """The instance table plus each query's last count of live standbys."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        """A standby is live while its last heartbeat is at most this old."""
        self.instances = Instances()
        self._counts: dict[str, int] = {}
        self._had: dict[str, int] = {}
        """Per query, its last count of live standbys that was not 0."""
        self._refusals: dict[tuple[str, str], Refusal] = {}
        """(query, instance) → its last failed promotion, while its failures run in a row."""

    def add(self, sample: TaskMetrics) -> None:
        self.instances.add(sample)

    def promoted(self, query_id: str, instance_id: str, now_ms: int) -> None:
        """A promotion was acknowledged: the instance is active now, and it was a standby (a
        controller restarted mid-promotion may never have heard it as one), so the next
        count asks for a new standby if it was the last."""
        self.instances.promoted(query_id, instance_id, now_ms)
        self._counts[query_id] = max(self._counts.get(query_id, 0), 1)
        self._refusals.pop((query_id, instance_id), None)

    def live(self, query_id: str, now_ms: int) -> list[Seen]:
        return self.instances.live_standbys(query_id, now_ms, self.timeout_s)

    def candidates(self, query_id: str, now_ms: int) -> tuple[list[Seen], list[str]]:
        """The live standbys that may be promoted now, and why any other is held off."""
        found, held_off = [], []
        for seen in self.live(query_id, now_ms):
            refusal = self._refusals.get((query_id, seen.instance_id))
            if refusal is None or now_ms >= refusal.until_ms:
                found.append(seen)
            else:
                held_off.append(refusal.describe(seen.instance_id, now_ms))
        return found, held_off

    def refused(self, query_id: str, instance_id: str, now_ms: int, why: str) -> float:
        """The promotion of `instance_id` failed: it is not tried again for a wait that
        doubles with each failure in a row, from RETRY_FIRST_S to RETRY_MAX_S (a failure
        that lasts, say a checkpoint it cannot continue, would otherwise be retried every
        cycle). Returns the wait in seconds."""
        before = self._refusals.get((query_id, instance_id))
        failures = 1 if before is None else before.failures + 1
        wait_s = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (failures - 1))
        self._refusals[(query_id, instance_id)] = Refusal(now_ms + int(wait_s * 1000),
                                                          failures, why)
        return wait_s

    def recount(self, now_ms: int, counted: Callable[[str], bool] = lambda _q: True
                ) -> dict[str, tuple[int, int]]:
        """Per query `counted`, (previous, current) live standby counts; forgets long-silent
        ones."""
        self.instances.prune(now_ms, forget_after_s=10 * self.timeout_s)
        counts: dict[str, tuple[int, int]] = {}
        for query_id in filter(counted, self.instances.queries()):
            now = len(self.live(query_id, now_ms))
            before = self._counts.get(query_id)
            if before is None:
                # Counted for the first time (this instance just started, or took the
                # query's shard over without having read it): the standbys it was heard with,
                # read back, so one lost before then is asked for too.
                before = self.instances.standbys_heard(query_id)
            counts[query_id] = (before, now)
            self._counts[query_id] = now
            if now > 0:
                self._had[query_id] = now
        return counts

    def forget(self, query_id: str) -> None:
        """All that was heard of the query's instances (this controller no longer reads its
        metrics)."""
        self.instances.forget(query_id)
        self._counts.pop(query_id, None)
        self._had.pop(query_id, None)
        for key in [k for k in self._refusals if k[0] == query_id]:
            del self._refusals[key]

    def recount_from_last_standbys(self, queries: Callable[[str], bool]) -> None:
        """Make the next count of the `queries` a new leader took over compare with each one's
        last count that was not 0: it then asks for the standbys a query lost while it
        followed (it wrote nothing then), once."""
        self._counts.update({q: had for q, had in self._had.items() if queries(q)})
