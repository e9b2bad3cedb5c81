"""A query whose job is down: what the broker says it owes, and why it is down.

Owns two pure readings of a query that processes nothing — lost (silent), stopped on purpose,
or halted waiting for its operator:
- `outage`: its backlog, the records the broker holds beyond the offsets its last committed
  batch reached (`TaskMetrics.partitions`' end offsets), and the arrival rate at the broker
  meanwhile, both from the end-offset probes (`probes`). Without a probe covering every source
  partition, or without a committed batch, the backlog is unknown (None), never 0: a job that
  is down reads its true lag, not its last report.
- `down`: the newest record of the instance last heard says it stopped on purpose
  (`TaskMetrics.stopped`) or halted (`TaskMetrics.halted`: its input was deleted by retention
  before it read it, say) → `results.Down`.
Neighbours: `loop` (asks both for a query that is not modelled), `failover` (a stop fails
over like a loss, a halt does not), `explain` (status line, Prometheus).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.core.probes import EndOffsets, covering, intervals
from controller.core.results import Down
from controller.core.wording import num
from schemas import TaskMetrics


@dataclass(frozen=True, slots=True)
class Outage:
    """What a query that processes nothing owes, as the broker says."""

    backlog_records: int | None
    """Records beyond its last committed batch, at the newest probe; None: unknown."""
    arrival_rate: float | None
    """Records per second reaching its source partitions over the probes; None: unknown."""

    def describe(self) -> str:
        """'backlog 67 894 records at the broker, growing 950/s' — or what is unknown."""
        if self.backlog_records is None:
            return ("backlog unknown (no committed batch, or the broker's end offsets are not "
                    "known)")
        text = f"backlog {num(self.backlog_records)} records at the broker"
        if self.arrival_rate is not None:
            text += f", growing {num(self.arrival_rate)}/s"
        return text

    def figures(self) -> dict[str, float]:
        found = {}
        if self.backlog_records is not None:
            found["backlog_records"] = float(self.backlog_records)
        if self.arrival_rate is not None:
            found["arrival_rate"] = self.arrival_rate
        return found


UNKNOWN = Outage(None, None)


def outage(last: TaskMetrics | None, probes: Sequence[EndOffsets]) -> Outage:
    """The backlog and arrival of a query whose newest sample (a batch, or a heartbeat that
    repeats where the last batch ended) is `last`, from the probes (oldest first)."""
    if last is None or not last.partitions:
        return UNKNOWN
    committed = {(p.topic, p.partition): p.end_offset for p in last.partitions}
    seen = covering(probes, committed.keys())
    if not seen:
        return UNKNOWN
    newest = seen[-1]
    backlog = sum(max(0, newest.offsets[k] - end) for k, end in committed.items())
    grown = intervals(seen, committed.keys())
    span_ms = sum(i.end_ms - i.start_ms for i in grown)
    rate = sum(i.records for i in grown) * 1000 / span_ms if span_ms > 0 else None
    return Outage(backlog, rate)


def down(last: TaskMetrics | None, beat: TaskMetrics | None) -> Down | None:
    """`Down` when the newest of the last instance's sample and beat says it stopped on
    purpose or halted; None while it runs (or says nothing)."""
    newest = max((r for r in (last, beat) if r is not None),
                 key=lambda r: r.batch_end_ms, default=None)
    if newest is None:
        return None
    if newest.stopped:
        return Down(f"instance {newest.instance_id} stopped on purpose (SIGTERM, Ctrl-C or "
                    "its max runtime), not lost", newest.instance_id, action="stopped")
    if newest.halted:
        return Down(f"instance {newest.instance_id} halted: {newest.halted}",
                    newest.instance_id, action="halted")
    return None
