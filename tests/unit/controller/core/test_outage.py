"""A query whose job is down: the backlog the broker holds for it (not its last report), and a
job's own word that it stopped on purpose or halted — the pure readings, then the loop on
in-memory ports (what it exports, what it writes, what it does not count as lost)."""

from __future__ import annotations

import math
from dataclasses import replace

from controller.core.outage import UNKNOWN, Outage, down, outage
from controller.core.probes import end_offsets
from controller.core.results import Down
from controller.loop.fakes import FakeClock, MemoryBus, MemoryEndOffsets
from controller.loop.ports import NullObserver
from controller.settings import ControllerSettings, PolicySettings
from schemas import Role, SourcePartition
from tests.unit.controller.core.test_failover import beat
from tests.unit.controller.traces import T0_MS, Job, end_ms, memory_loop, simulate

STEADY = Job(rates=[(0, 300)], per_unit=210, parallelism=2, instance_id="a")
FAST = ControllerSettings(policy=PolicySettings(lost_after_min_s=10, cooldown_s=30))


def test_the_backlog_of_a_job_that_is_down_is_what_the_broker_holds_beyond_its_last_commit(
        ) -> None:
    [last] = simulate(STEADY, 2)[-1:]
    committed = {(p.topic, p.partition): p.end_offset for p in last.partitions}
    probes = [end_offsets(T0_MS + s * 1000, {k: end + 100 * s for k, end in committed.items()})
              for s in range(1, 11)]
    found = outage(last, probes)
    assert found.backlog_records == 2 * 100 * 10
    assert found.arrival_rate is not None and math.isclose(found.arrival_rate, 200)
    assert found.describe() == "backlog 2 000 records at the broker, growing 200/s"


def test_without_a_probe_of_every_partition_or_a_commit_the_backlog_is_unknown_not_0() -> None:
    [last] = simulate(STEADY, 2)[-1:]
    half = {(last.partitions[0].topic, last.partitions[0].partition): 10**6}
    assert outage(last, [end_offsets(T0_MS, half)]) == UNKNOWN
    assert outage(replace(last, partitions=()), [end_offsets(T0_MS, half)]) == UNKNOWN
    assert outage(None, []) == UNKNOWN
    assert UNKNOWN.describe().startswith("backlog unknown")
    assert UNKNOWN.figures() == {}


def test_a_job_says_it_stopped_or_halted_in_its_newest_record_only() -> None:
    heartbeat = replace(beat("a", T0_MS, role=Role.ACTIVE), stopped=True)
    stopped = down(heartbeat, None)
    assert isinstance(stopped, Down) and stopped.action == "stopped"
    assert stopped.reason.startswith("instance a stopped on purpose")
    halted = down(replace(heartbeat, stopped=False, halted="input lost"), None)
    assert isinstance(halted, Down) and halted.action == "halted"
    assert halted.reason == "instance a halted: input lost"
    # A newer record that runs again (a restarted process) clears it.
    assert down(heartbeat, replace(heartbeat, stopped=False, beat=True,
                                   batch_end_ms=T0_MS + 1)) is None


class Exported(NullObserver):
    def __init__(self) -> None:
        self.outages: dict[str, Outage] = {}
        self.down_counts: dict[str, int] = {}
        self.lost_count = 0

    def outage(self, query_id: str, outage: Outage) -> None:
        self.outages[query_id] = outage

    def down(self, action: str, query_ids: list[str]) -> None:
        self.down_counts[action] = len(query_ids)

    def lost(self, query_ids: list[str]) -> None:
        self.lost_count = len(query_ids)


def down_job(last_record_change: dict[str, object] | None, seconds: int = 30,
             ) -> tuple[Exported, MemoryBus, int]:
    """30 s of a steady job, then its last record (changed as given, or none: killed) and
    `seconds` of silence while the broker's end offsets grow 300/s."""
    bus, clock, offsets, observer = MemoryBus(), FakeClock(), MemoryEndOffsets(), Exported()
    loop = memory_loop(bus, clock, FAST, offsets=offsets, observer=observer)
    trace = simulate(STEADY, 30)
    committed = {(p.topic, p.partition): p.end_offset for p in trace[-1].partitions}
    if last_record_change is not None:
        trace.append(replace(trace[-1], batch_id=-1, input_rows=0, batch_start_ms=end_ms(trace),
                             **last_record_change))  # type: ignore[arg-type]
    bus.publish_metrics(*trace)
    clock.ms = end_ms(trace)
    for second in range(seconds):
        offsets.ends = {k: end + 150 * second for k, end in committed.items()}
        loop.run(max_cycles=1)
        clock.advance(1)
    return observer, bus, 2 * 150 * (seconds - 1)


def test_a_killed_job_is_lost_with_the_backlog_the_broker_holds_and_no_rates_of_its_own(
        ) -> None:
    observer, bus, owed = down_job(None)
    assert observer.lost_count == 1
    found = observer.outages["q1"]
    assert found.backlog_records == owed and found.arrival_rate is not None
    [lost] = [d for d in bus.written_decisions() if d.action == "lost"]
    assert "backlog" in lost.reason and lost.figures["backlog_records"] > 0


def test_a_job_stopped_on_purpose_is_not_counted_lost_and_says_what_it_owes() -> None:
    observer, bus, owed = down_job({"stopped": True})
    assert observer.lost_count == 0 and observer.down_counts == {"stopped": 1, "halted": 0}
    assert observer.outages["q1"].backlog_records == owed
    [stopped] = [d for d in bus.written_decisions() if d.action == "stopped"]
    assert stopped.reason.startswith("instance a stopped on purpose")
    assert not [d for d in bus.written_decisions() if d.action == "lost"]


def test_a_halted_job_is_reported_once_and_no_standby_is_promoted_for_it() -> None:
    observer, bus, _owed = down_job({"halted": "input lost to retention"})
    assert observer.down_counts["halted"] == 1 and observer.lost_count == 0
    assert [d.action for d in bus.written_decisions()] == ["halted"]
    assert bus.sent_controls() == []


def test_a_job_stopped_on_purpose_is_replaced_by_a_live_standby() -> None:
    bus, clock, offsets = MemoryBus(), FakeClock(), MemoryEndOffsets()
    loop = memory_loop(bus, clock, FAST, offsets=offsets)
    trace = simulate(STEADY, 30)
    stop = replace(trace[-1], batch_id=-1, stopped=True,
                   partitions=tuple(SourcePartition(p.topic, p.partition, p.end_offset,
                                                    p.end_offset, p.end_offset)
                                    for p in trace[-1].partitions))
    bus.publish_metrics(*trace, beat("s1", end_ms(trace)), stop)
    clock.ms = end_ms(trace)
    loop.run(max_cycles=1)
    [promotion] = bus.sent_controls()
    assert (promotion.parameter, promotion.value) == ("active_instance", "s1")
    assert "stopped on purpose" in promotion.reason
