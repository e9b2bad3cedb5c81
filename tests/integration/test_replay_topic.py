"""`controller replay --from/--to` and `controller record` against the real local broker.

Metrics records are produced with explicit timestamps before, inside and after a time range;
only the ones inside it may be replayed or recorded, and a garbage record inside it is counted
with its position instead of stopping anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from controller.replay.trace import read_trace
from schemas import TaskMetrics, codec_for
from streamctl.cli import main
from tests.support.kafka import produce
from tests.support.waiting import until
from tests.unit.controller.traces import Job, simulate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

STEP = Job(rates=[(0, 100), (30, 900)], per_unit=150, parallelism=2, max_per_batch=1500)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _shifted(samples: list[TaskMetrics], to_start_ms: int) -> list[TaskMetrics]:
    """The same batches, moved in time so the first one ends at `to_start_ms` (recent enough
    for the broker's retention)."""
    delta = to_start_ms - samples[0].batch_end_ms
    return [replace(m, batch_start_ms=m.batch_start_ms + delta,
                    batch_end_ms=m.batch_end_ms + delta) for m in samples]


@pytest.fixture
def metrics_topic(bootstrap_servers: str, new_topic: Callable[..., str]
                  ) -> tuple[str, list[TaskMetrics], int, int]:
    """A topic with a decoy before and after the range [from_ms, to_ms] and garbage inside."""
    topic = new_topic(partitions=2)
    start_ms = int(time.time() * 1000) - 600_000
    samples = _shifted(simulate(STEP, 120), start_ms)
    from_ms, to_ms = samples[0].batch_end_ms, samples[-1].batch_end_ms
    codec = codec_for(TaskMetrics)
    # In write order, one partition (one key): a decoy before the range, the samples with a
    # record stamped just after the range among them (timestamps within a partition are only
    # roughly ordered) and garbage, then a decoy after the range.
    stamped = [(from_ms - 60_000, codec.encode(samples[0]))]
    stamped += [(m.batch_end_ms, codec.encode(m)) for m in samples[:-1]]
    stamped += [(to_ms + 5_000, codec.encode(samples[0])), (from_ms + 1000, b"garbage")]
    stamped += [(to_ms, codec.encode(samples[-1])), (to_ms + 60_000, codec.encode(samples[0]))]
    produce(bootstrap_servers, topic, [(b"q1", payload, stamp) for stamp, payload in stamped])
    return topic, samples, from_ms, to_ms


def test_replay_from_the_topic_between_two_times(
        bootstrap_servers: str, metrics_topic: tuple[str, list[TaskMetrics], int, int],
        capsys: pytest.CaptureFixture[str]) -> None:
    topic, samples, from_ms, to_ms = metrics_topic
    code = main(["controller", "replay", "--from", _iso(from_ms), "--to", _iso(to_ms),
                 "--bootstrap-servers", bootstrap_servers, "--metrics-topic", topic, "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["records"] == len(samples)
    assert doc["summary"]["bad_records"] == 1
    assert doc["start_ms"] == from_ms
    ups = [e for e in doc["events"] if e["action"] == "scale_up"]
    assert ups and ups[0]["at_s"] > 30 and not ups[0]["counterfactual"]


def test_record_copies_the_range_to_a_trace_file(
        bootstrap_servers: str, metrics_topic: tuple[str, list[TaskMetrics], int, int],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic, samples, from_ms, to_ms = metrics_topic
    out = tmp_path / "trace.jsonl"
    code = main(["controller", "record", "-o", str(out), "--from", _iso(from_ms),
                 "--to", _iso(to_ms), "--bootstrap-servers", bootstrap_servers,
                 "--metrics-topic", topic])
    assert code == 0
    printed = capsys.readouterr().out
    assert f"recorded {len(samples)} metrics records" in printed and "1 bad" in printed
    assert f"{topic}[" in printed  # the bad record's position
    trace = read_trace(out)
    assert sorted((e.metrics for e in trace.entries), key=lambda m: m.batch_id) == samples
    assert [e.timestamp_ms for e in trace.entries] == sorted(m.batch_end_ms for m in samples)
    assert len(trace.bad_records) == 1 and trace.bad_records[0].where.startswith(topic)


def test_record_for_a_duration_sees_records_written_meanwhile(
        bootstrap_servers: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic()
    out = tmp_path / "live.jsonl"
    import threading

    recorder = threading.Thread(target=main, args=([
        "controller", "record", "-o", str(out), "--duration-s", "10",
        "--bootstrap-servers", bootstrap_servers, "--metrics-topic", topic],))
    recorder.start()
    try:
        # The header is out once the recorder's clock has started, and says when: a record
        # stamped a second later, written now, is written meanwhile, whenever the recorder
        # gets to look up its offsets.
        until(lambda: out.exists() and out.read_text().endswith("\n"), 30,
              "the recorder to write its header")
        from_ms = json.loads(out.read_text().splitlines()[0])["header"]["from_ms"]
        sample = simulate(STEP, 2)[0]
        produce(bootstrap_servers, topic, [codec_for(TaskMetrics).encode(sample)],
                timestamp_ms=from_ms + 1000)
    finally:
        recorder.join(60)
    assert not recorder.is_alive()
    assert [e.metrics for e in read_trace(out).entries] == [sample]
