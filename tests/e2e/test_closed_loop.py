"""The closed loop, end to end, on real processes: broker, job, controller, load.

A step in the input rate makes the job fall behind; the controller must notice, send one
control tuple raising the input parallelism, the job must apply it and ack, the backlog must
drain, and every produced record must be accounted for exactly once in the job's output
(count and sum of sequence numbers per sensor and window, one output row per window).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from schemas import Ack, Decision, Outcome, TaskMetrics
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.processes import Child, start_child, stop_all
from streamctl.profiles import RateProfile
from streamctl.tail import Tail
from streamctl.view import QueryView
from tests.accounting import assert_every_record_accounted_for, flush_last_windows, until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

WINDOW_MS = 10_000
QUERY = "e2e-sensors"


@pytest.fixture
def loop_topics(new_topic: Callable[..., str]) -> dict[str, str]:
    return {
        "input": new_topic(partitions=2), "output": new_topic(partitions=2),
        "dlq": new_topic(), "metrics": new_topic(), "control": new_topic(),
        "acks": new_topic(), "decisions": new_topic(),
    }


@pytest.fixture
def closed_loop(bootstrap_servers: str, loop_topics: dict[str, str],
                tmp_path: Path) -> Iterator[list[Child]]:
    t = loop_topics
    env = {
        "STREAMCTL_BOOTSTRAP_SERVERS": bootstrap_servers,
        "STREAMCTL_METRICS_TOPIC": t["metrics"], "STREAMCTL_CONTROL_TOPIC": t["control"],
        "STREAMCTL_ACK_TOPIC": t["acks"], "STREAMCTL_DECISIONS_TOPIC": t["decisions"],
    }
    job = start_child("job", [
        "job", "run", "--query-id", QUERY, "--input-topic", t["input"],
        "--output-topic", t["output"], "--dlq-topic", t["dlq"],
        "--checkpoint-dir", str(tmp_path / "checkpoint"), "--input-parallelism", "2",
        "--enrichment-cost-ms", "5", "--trigger-interval-s", "1",
        "--window-s", str(WINDOW_MS // 1000), "--watermark-s", "10", "--metrics-port", "0",
    ], tmp_path, env)
    controller = start_child("controller", [
        "controller", "run", "--metrics-port", "0", "--cooldown-s", "20",
    ], tmp_path, env)
    children = [job, controller]
    yield children
    stop_all(children)


def test_backlog_triggers_one_scale_up_that_drains_it_without_losing_a_record(
    bootstrap_servers: str, loop_topics: dict[str, str], closed_loop: list[Child],
) -> None:
    t = loop_topics
    tail = Tail(bootstrap_servers, {t["metrics"]: TaskMetrics, t["acks"]: Ack,
                                    t["decisions"]: Decision}, from_beginning=True)
    view = QueryView(QUERY)
    decisions: list[Decision] = []
    acks: list[Ack] = []

    def consume() -> None:
        for _topic, record in tail.poll(0.2):
            if isinstance(record, TaskMetrics):
                view.add(record)
            elif isinstance(record, Decision):
                decisions.append(record)
            elif isinstance(record, Ack):
                acks.append(record)
        for child in closed_loop:
            assert child.alive(), f"{child.name} died:\n{child.log_tail()}"

    until(lambda: (consume(), bool(view.samples))[1], 150, "the job's first metrics")

    # 120/s is well within two units of ~200/s each; 900/s needs about seven.
    profile = RateProfile("step", 120, 900, start_s=10)
    ledger = Ledger(WINDOW_MS)
    load = threading.Thread(target=run_load, args=(
        LoadSpec(bootstrap_servers, t["input"], profile, duration_s=60), ledger))
    step_at = time.monotonic() + 10
    load.start()

    until(lambda: (consume(), any(a.outcome is Outcome.APPLIED for a in acks))[1], 120,
           "an applied control tuple")
    first_control_after_step_s = time.monotonic() - step_at
    load.join(90)
    assert ledger.failed == 0 and ledger.acked > 20_000

    applied = [a for a in acks if a.outcome is Outcome.APPLIED]
    scale_ups = [d for d in decisions if d.control_id]
    assert scale_ups and int(scale_ups[0].target_value) > 2, decisions
    assert scale_ups[0].control_id == applied[0].control_id
    assert applied[0].pause_ms > 0

    # The backlog drains: the job catches up with everything that was produced.
    until(lambda: (consume(), view.samples and view.samples[-1].input_parallelism > 2
                    and view.lag_records(tail.log_end_total(t["input"])) == 0)[1],
           120, "the backlog to drain at the new parallelism")

    flush_last_windows(bootstrap_servers, t["input"])
    assert_every_record_accounted_for(bootstrap_servers, t["output"], ledger)
    print(f"\nload step -> applied control tuple: {first_control_after_step_s:.1f} s; "
          f"pause {applied[0].pause_ms} ms; decision: {scale_ups[0].reason}")
    tail.close()
