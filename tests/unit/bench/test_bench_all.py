"""`python -m bench all`: every benchmark of the catalog can run, the commands are the
catalog's, and a name it does not know is refused."""

from __future__ import annotations

import importlib.util

import pytest

from bench import __main__ as bench_all
from bench.catalog import BENCHMARKS


def test_every_benchmark_in_the_catalog_is_a_module_to_run() -> None:
    missing = [b.name for b in BENCHMARKS if importlib.util.find_spec(f"bench.{b.name}") is None]
    assert not missing, f"no module bench.<name> for {missing}"


def test_list_prints_each_command_at_the_settings_asked_for(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_all.main(["all", "--list", "--only", "takeover", "sink"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "python -m bench.takeover --runs 5",
        "python -m bench.sink --rows 100 2000 20000 --batches 12"]
    assert bench_all.main(["all", "--list", "--quick", "--only", "takeover"]) == 0
    assert capsys.readouterr().out.splitlines() == ["python -m bench.takeover --runs 2"]


def test_an_unknown_benchmark_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SystemExit, match="no benchmark named nope; there are sim, fleet"):
        bench_all.main(["all", "--only", "nope"])
