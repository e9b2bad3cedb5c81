"""The trace file format and the replay's drive of the control loop, on hand-built traces."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from controller.replay.driver import ReplayOptions, render_text, replay
from controller.replay.trace import (
    BadRecord,
    Trace,
    TraceEntry,
    TraceWriter,
    parse_trace,
    read_trace,
)
from controller.settings import ControllerSettings, PolicySettings
from schemas import TaskMetrics
from streamctl.cli import main
from tests.unit.controller.traces import T0_MS, Job, simulate

STEP = Job(rates=[(0, 100), (30, 900)], per_unit=150, parallelism=2, max_per_batch=1500)
"""100/s, then 900/s from 30 s, on 2 units of 150/s: needs a scale-up to ~9 after the step."""


def write_trace(path: Path, trace: Trace) -> None:
    """`trace` as `bench.record_traces` would have written it."""
    with path.open("w") as out:
        writer = TraceWriter(out, topic=trace.topic, from_ms=trace.start_ms, notes=trace.notes)
        for entry in trace.entries:
            writer.write(entry)
        for bad in trace.bad_records:
            writer.bad(bad)
        writer.close(trace.end_ms)


def trace_of(samples: list[TaskMetrics], delay_ms: int = 0, **kwargs: object) -> Trace:
    """Each sample reaches Kafka `delay_ms` after its batch ended."""
    entries = tuple(TraceEntry(m.batch_end_ms + delay_ms, m, 0, i)
                    for i, m in enumerate(samples))
    return Trace(entries, topic="metrics", **kwargs)  # type: ignore[arg-type]


# -- the file format ---------------------------------------------------------------------------


def test_a_trace_survives_the_file_round_trip(tmp_path: Path) -> None:
    trace = trace_of(simulate(STEP, 60), from_ms=T0_MS - 1000, to_ms=T0_MS + 90_000,
                     notes={"scenario": "step"},
                     bad_records=(BadRecord("metrics[0]@7", "bad marker"),))
    write_trace(tmp_path / "t.jsonl", trace)
    assert read_trace(tmp_path / "t.jsonl") == trace


def test_each_record_line_is_the_avro_dict_with_its_kafka_timestamp(tmp_path: Path) -> None:
    samples = simulate(STEP, 10)
    write_trace(tmp_path / "t.jsonl", trace_of(samples, delay_ms=250))
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert "header" in lines[0] and "footer" in lines[-1]
    assert lines[1] == {"timestamp_ms": samples[0].batch_end_ms + 250, "partition": 0,
                        "offset": 0, "metrics": samples[0].to_avro()}
    assert lines[-1]["footer"]["records"] == len(samples)


def test_bad_lines_are_counted_with_their_line_number_and_skipped() -> None:
    good = {"metrics": simulate(STEP, 2)[0].to_avro()}
    trace = parse_trace(["not json\n", json.dumps(good) + "\n", "\n", '{"metrics": {}}\n'],
                        source="x.jsonl")
    assert len(trace.entries) == 1
    assert trace.entries[0].timestamp_ms == trace.entries[0].metrics.batch_end_ms
    assert [b.where for b in trace.bad_records] == ["x.jsonl line 1", "x.jsonl line 4"]


def test_header_and_footer_are_optional_and_records_are_sorted_by_time() -> None:
    samples = simulate(STEP, 20)
    lines = [json.dumps({"timestamp_ms": m.batch_end_ms, "metrics": m.to_avro()})
             for m in reversed(samples)]
    trace = parse_trace(lines)
    assert [e.metrics for e in trace.entries] == samples
    assert trace.start_ms == samples[0].batch_end_ms
    assert trace.end_ms == samples[-1].batch_end_ms


# -- driving the loop ----------------------------------------------------------------------------


def test_a_step_is_replayed_as_one_scale_up_after_it_then_counterfactuals() -> None:
    result = replay(trace_of(simulate(STEP, 120)), ControllerSettings())
    decisions = [e for e in result.events if e.kind == "decision"]
    first = decisions[0]
    assert first.action == "scale_up" and first.current == "2" and int(first.target) > 2
    assert 30 < first.at_s < 60 and not first.counterfactual
    assert result.first_actuation_s == {"q1": first.at_s}
    assert all(e.counterfactual for e in result.events if e.at_s > first.at_s)
    acked = [e for e in result.events if e.action == "ack_applied"]
    assert acked and acked[0].at_s == pytest.approx(first.at_s + 5.0, abs=1.0)


def test_the_clock_follows_the_recorded_kafka_timestamps() -> None:
    samples = simulate(STEP, 120)
    on_time = replay(trace_of(samples), ControllerSettings())
    late = replay(trace_of(samples, delay_ms=7_000, from_ms=samples[0].batch_end_ms),
                  ControllerSettings())
    first = next(e for e in on_time.events if e.kind == "decision")
    later = next(e for e in late.events if e.kind == "decision")
    assert later.at_s == pytest.approx(first.at_s + 7.0, abs=1.0)


def test_after_the_simulated_ack_the_loop_keeps_deciding_on_relabelled_metrics() -> None:
    result = replay(trace_of(simulate(STEP, 240)), ControllerSettings())
    ups = [e for e in result.events if e.action == "scale_up"]
    # The recorded job never changed: the backlog is still there, so the policy asks again.
    assert len(ups) >= 2 and ups[1].counterfactual and ups[1].current == "2"


def test_replay_is_deterministic() -> None:
    trace = trace_of(simulate(STEP, 120))
    assert replay(trace, ControllerSettings()) == replay(trace, ControllerSettings())


def test_dry_run_advises_once_per_cooldown_and_nothing_is_counterfactual() -> None:
    settings = ControllerSettings(dry_run=True, policy=PolicySettings(cooldown_s=20))
    result = replay(trace_of(simulate(STEP, 120)), settings)
    ups = [e for e in result.events if e.action == "scale_up"]
    assert len(ups) >= 2 and ups[1].at_s - ups[0].at_s >= 20
    assert not any(e.counterfactual for e in result.events)
    assert not any(e.kind == "outcome" for e in result.events)
    assert result.first_actuation_s == {}


def test_tail_keeps_the_clock_running_after_the_last_record() -> None:
    trace = trace_of(simulate(STEP, 20))
    short = replay(trace, ControllerSettings())
    longer = replay(trace, ControllerSettings(), ReplayOptions(tail_s=30))
    assert longer.end_ms - short.end_ms == 30_000
    assert longer.cycles == short.cycles + 30 / ControllerSettings().poll_timeout_s  # idle


def test_an_ack_timeout_shorter_than_the_ack_delay_is_replayed_as_a_timeout() -> None:
    settings = ControllerSettings(ack_timeout_s=3)
    result = replay(trace_of(simulate(STEP, 120)), settings, ReplayOptions(ack_delay_s=10))
    assert "ack_timeout" in [e.action for e in result.events]


def test_json_and_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = simulate(STEP, 120)
    write_trace(tmp_path / "t.jsonl", trace_of(samples))
    assert main(["controller", "replay", "--trace", str(tmp_path / "t.jsonl"), "--json",
                 "--cooldown-s", "15", "--ack-delay-s", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["records"] == len(samples) and doc["summary"]["actions"]["scale_up"]
    up = next(e for e in doc["events"] if e["action"] == "scale_up")
    assert set(up) >= {"at_s", "action", "parameter", "current", "target", "reason",
                       "counterfactual"}
    lines: list[str] = []
    render_text(replay(trace_of(samples), ControllerSettings()), "t.jsonl", lines.append)
    assert any("scale_up input_parallelism 2 →" in line for line in lines)
    assert lines[-1].startswith("note: the recorded job never changed")


def test_the_replay_reports_bad_records_of_the_trace() -> None:
    trace = replace(trace_of(simulate(STEP, 20)),
                    bad_records=(BadRecord("metrics[0]@3", "bad marker"),))
    assert replay(trace, ControllerSettings()).summary()["bad_records"] == 1


def test_replay_without_a_source_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "replay"]) == 2
    assert "--trace" in capsys.readouterr().err


def test_times_are_iso_8601_utc_unless_an_offset_is_given() -> None:
    from controller.cli import _time_ms

    assert _time_ms("2023-11-14T22:13:20Z") == T0_MS
    assert _time_ms("2023-11-14T22:13:20") == T0_MS
    assert _time_ms("2023-11-15T00:13:20+02:00") == T0_MS


def test_an_inverted_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "replay", "--from", "2026-01-02T00:00:00Z",
                 "--to", "2026-01-01T00:00:00Z"]) == 2
    assert "--from is after --to" in capsys.readouterr().err
