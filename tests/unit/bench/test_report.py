"""`bench.report`: docs/benchmarks.md is what bench/results/ renders to, and every table
says when, on what and by which command its figures were measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import record, report


def test_the_benchmarks_page_is_what_the_results_render_to() -> None:
    assert report.main(["--check"]) == 0, "run `python -m bench.report --write`"


def test_every_result_file_has_a_section() -> None:
    names = {p.stem for p in record.RESULTS_DIR.glob("*.json")}
    assert names - {"sim"} <= {name for name, *_ in report.SECTIONS}  # sim: simulation.md


def test_a_stamped_result_names_its_date_machine_load_speed_and_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(record, "reference_loop_ms", lambda: 123.4)  # the stamp, not the timing
    runs = [{"parallelism": 2, "throughput_per_s": 100.0, "median_batch_s": 4.0,
             "start_to_first_commit_s": 20.0},
            {"parallelism": 4, "throughput_per_s": 180.0, "median_batch_s": 2.2,
             "start_to_first_commit_s": 18.0}]
    record.write("throughput", {"enrichment_cost_ms": 5.0, "runs": runs}, 1.5,
                 argv=["--parallelism", "2", "4"])
    stamped = json.loads((tmp_path / "throughput.json").read_text())
    assert stamped["machine"]["cpus"] and stamped["machine"]["load_average_1m_before"] == 1.5
    text = report.render(tmp_path)
    assert "by `python -m bench.throughput --parallelism 2 4`" in text
    assert f"Measured {stamped['measured_at']} on " in text and "load average 1.5 before" in text
    assert stamped["machine"]["reference_loop_ms"] == 123.4 and "reference loop 123 ms" in text
    assert "| 4 | 180 | 1.80× | 2.20 | 18.0 |" in text


def test_a_reaction_run_of_some_scenarios_replaces_their_rows_and_keeps_the_others() -> None:
    from bench import reaction

    def row(scenario: str) -> dict[str, object]:
        return {"scenario": scenario, "runs": 2, "tuples": [3, 3]}

    previous = {"measured_at": "2026-11-25T18:09:42Z", "command": "python -m bench.reaction",
                "batch_cap": reaction.BATCH_CAP, "change_at_s": reaction.CHANGE_AT_S,
                "summary": [row(s) for s in ("step", "spike", "ramp")],
                "all_runs": [{"scenario": s} for s in ("step", "spike", "ramp", "ramp")]}
    fresh = {"scenario": "ramp", "runs": 1, "tuples": [1]}
    rows, runs = reaction.kept_beside([fresh], [{"scenario": "ramp", "new": True}], previous)
    assert [(r["scenario"], r["tuples"]) for r in rows] == [
        ("step", [3, 3]), ("spike", [3, 3]), ("ramp", [1])]
    assert rows[0]["measured_at"] == "2026-11-25T18:09:42Z" != rows[2]["measured_at"]
    assert [r["scenario"] for r in runs] == ["ramp", "step", "spike"] and runs[0]["new"]
    other_cap = {**previous, "batch_cap": reaction.BATCH_CAP + 1}
    assert [r["scenario"] for r in reaction.kept_beside([fresh], [], other_cap)[0]] == ["ramp"]


def test_a_run_of_some_sizes_by_hand_replaces_their_rows_and_runs_and_keeps_the_others(
        ) -> None:
    from bench import reaction

    def row(units: int, stamp: str) -> dict[str, object]:
        return {"units": units, "runs": 1, "measured_at": stamp}

    previous = {"measured_at": "2026-11-25T18:09:42Z", "command": "python -m bench.reaction",
                "batch_cap": reaction.BATCH_CAP, "change_at_s": reaction.CHANGE_AT_S,
                "by_hand": [row(4, "old 4"), row(16, "old 16")],
                "by_hand_runs": [{"targets": ["4"]}, {"targets": ["16"]}]}
    rows, runs = reaction.by_hand_kept_beside(
        [{"units": 8, "runs": 1}, {"units": 16, "runs": 1}],
        [{"targets": ["8"]}, {"targets": ["16"], "new": True}], previous)
    assert [r["units"] for r in rows] == [4, 8, 16]
    assert rows[0]["measured_at"] == "old 4" and "old 16" not in {r["measured_at"] for r in rows}
    assert [(r["targets"], r.get("new")) for r in runs] == [
        (["8"], None), (["16"], True), (["4"], None)]
    other_change = {**previous, "change_at_s": reaction.CHANGE_AT_S + 1}
    assert [r["units"] for r in reaction.by_hand_kept_beside([], [], other_change)[0]] == []


def test_the_default_query_limit_is_what_the_fleet_benchmark_measured_one_instance_sustains(
        ) -> None:
    from controller.settings import ModelSettings

    fleet = json.loads((record.RESULTS_DIR / "fleet.json").read_text())
    assert ModelSettings().max_queries <= fleet["sustainable_queries_8_partitions"], \
        "lower model.max_queries, or make the cycle cheaper and rerun python -m bench.fleet"


def test_a_step_set_by_hand_is_summarised_per_size_with_its_refusals_and_shown_beside_the_controllers_choice(  # noqa: E501
        ) -> None:
    from bench import reaction

    def by_hand(units: int, recovered: float) -> reaction.Run:
        return reaction.Run("step", 300.0, 1, 4.0, 9.0, 3.0, recovered, (str(units),),
                            change_to_caught_up_s=recovered - 20)

    def refused(units: int) -> reaction.Run:
        return reaction.Run("step", 300.0, 1, 4.0, None, None, None, (str(units),))

    rows, _ = reaction.by_hand_kept_beside(reaction.by_hand_summary(
        [by_hand(8, 50.0), by_hand(4, 70.0), by_hand(8, 40.0), refused(8)]), [], None)
    assert [(r["units"], r["runs"], r["applied"], r["change_to_recovered_s"]) for r in rows] == [
        (4, 1, 1, 70.0), (8, 3, 2, 45.0)]
    result = {"batch_cap": 1500, "targets": {"tuples": {"step": "1"}},
              "summary": [{"scenario": "step", "runs": 1, "tuples": [1], **dict.fromkeys(
                  ("change_to_tuple_s", "tuple_to_applied_s", "pause_s",
                   "change_to_recovered_s"))}],
              "all_runs": [{"scenario": "step", "targets": ["16"]}], "by_hand": rows}
    text = "\n".join(report.reaction(result))
    assert "The controller chose 16 units" in text and "750 records a unit" in text
    assert "| 8 | 3 | 2 | 4.0 | 9.0 | 3.0 | 45.0 | 25.0 | 20" in text
