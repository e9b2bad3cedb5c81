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


def test_a_stamped_result_names_its_date_machine_load_and_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record, "RESULTS_DIR", tmp_path)
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
    assert "| 4 | 180 | 1.80× | 2.20 | 18.0 |" in text
