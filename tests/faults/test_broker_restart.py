"""The broker stopped and restarted under load, on the broker the suite may restart
(`restartable_broker`): the job and two controller instances ride it out, the output stays
exactly once, and exactly one instance leads again."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from schemas import Ack, ControlTuple, Outcome
from streamctl.stack.broker import LocalBroker
from streamctl.stack.tcp import find_free_ports
from streamctl.stack.topics import TopicSpec, ensure_topics
from tests.support.fault_bed import TOPIC_KINDS, FaultBed, now_ms, report
from tests.support.kafka import decoded_or_none, read_committed
from tests.support.prometheus import scraped
from tests.support.waiting import holds, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(720)]


def test_broker_stop_and_restart_under_two_controllers(restartable_broker: LocalBroker,
                                                       tmp_path: Path) -> None:
    """The job and two controller instances ride out the broker's restart: the output stays
    exactly once, once the broker is back exactly one instance leads (whichever the group
    elects), and every tuple sent was applied once, none refused."""
    bootstrap = restartable_broker.bootstrap_servers
    names = {k: f"faults-{k}-{uuid.uuid4().hex[:8]}" for k in TOPIC_KINDS}
    ensure_topics(bootstrap, [TopicSpec(n, partitions=2 if k in ("input", "output") else 1)
                              for k, n in names.items()], timeout_s=30)
    bed = FaultBed(bootstrap, names, tmp_path)
    ports = dict(zip(("controller-1", "controller-2"), find_free_ports(2), strict=True))
    try:
        bed.start_job("job-1")
        for name, port in ports.items():
            bed.start_controller(name, "--instance-id", name, "--metrics-port", str(port))
        bed.warm()
        restartable_broker.stop(timeout_s=30)
        fault = now_ms()
        restartable_broker.start(timeout_s=120)
        report("broker stopped and restarted (same port, same data) under two controllers",
               bed.recovery_s(fault, 240))
        bed.wait_commit_after(now_ms(), 60, "a steady batch after the broker came back")

        def leaders() -> float:
            return sum(scraped(port, "streamctl_controller_leader", instance=name)
                       for name, port in ports.items())

        until(lambda: leaders() == 1, 60, "exactly one controller leading again", 0.5)
        holds(lambda: leaders() == 1 and bed.processes_alive(), 5,
              "exactly one controller leading, every process up", 1)
        bed.finish_and_check()
        bed.assert_alive()
        # The backlog the outage left may call for more units (how much depends on how fast
        # this machine drains it): whatever was sent, the job applied each tuple once, none
        # refused as stale, as a second instance's would be.
        tuples = decoded_or_none(read_committed(bootstrap, names["control"]), ControlTuple)
        sent = {t.control_id for t in tuples if t is not None}
        assert len(sent) == len(tuples), f"undecodable or repeated tuples: {tuples}"

        def answers() -> list[Ack] | None:
            bed.follow_commits()
            answered = [a for a in bed.watch.acks if a.control_id in sent]
            return answered if {a.control_id for a in answered} == sent else None

        answered = until(answers, 60, "an answer to every tuple sent", 0.5) if sent else []
        assert [a.outcome for a in answered] == [Outcome.APPLIED] * len(sent), answered
    finally:
        bed.close()
