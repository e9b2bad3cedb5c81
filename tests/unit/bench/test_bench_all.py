"""`python -m bench all`: every benchmark of the catalog takes the arguments the catalog
gives it, the commands are the catalog's, and a name it does not know is refused."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

import pytest

from bench import __main__ as bench_all
from bench.catalog import BENCHMARKS, Benchmark
from bench.freshness import Stale


class Parsed(Exception):
    """Raised once a benchmark's own parser accepted its arguments: it runs nothing."""


@pytest.mark.parametrize("benchmark", BENCHMARKS, ids=lambda b: b.name)
def test_each_benchmark_accepts_its_full_and_quick_arguments(
        benchmark: Benchmark, monkeypatch: pytest.MonkeyPatch) -> None:
    module = importlib.import_module(f"bench.{benchmark.name}")
    if not hasattr(module, "main"):  # a package: its __main__
        module = importlib.import_module(f"bench.{benchmark.name}.__main__")
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, args: Any = None,
                        namespace: Any = None) -> Any:
        parse(self, args, namespace)
        raise Parsed
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    for args in (benchmark.full, benchmark.quick):
        monkeypatch.setattr(sys, "argv", [f"bench.{benchmark.name}", *args])
        with pytest.raises(Parsed):
            module.main()


def test_list_prints_each_command_at_the_settings_asked_for(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_all.main(["all", "--list", "--only", "takeover", "sink"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "python -m bench.takeover --runs 5",
        "python -m bench.sink --rows 100 2000 20000 --batches 12"]
    assert bench_all.main(["all", "--list", "--quick", "--only", "takeover"]) == 0
    assert capsys.readouterr().out.splitlines() == ["python -m bench.takeover --runs 2"]


def test_stale_lists_the_stale_benchmarks_within_only_in_the_catalogs_order_and_not_quick(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench_all.freshness, "stale", lambda: [
        Stale("reaction", "changed since"), Stale("sim", "no result")])
    assert bench_all.main(["all", "--list", "--stale"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "python -m bench.sim", "python -m bench.reaction --runs 1 --by-hand 4 8 16"]
    assert bench_all.main(["all", "--list", "--stale", "--only", "takeover", "sim"]) == 0
    assert capsys.readouterr().out.splitlines() == ["python -m bench.sim"]
    assert bench_all.main(["all", "--stale", "--only", "takeover"]) == 0
    assert capsys.readouterr().out.splitlines() == ["nothing stale"]
    with pytest.raises(SystemExit):
        bench_all.main(["all", "--stale", "--quick"])


def test_an_unknown_benchmark_is_refused_with_the_known_ones() -> None:
    with pytest.raises(SystemExit, match="no benchmark named nope; there are sim, day, fleet"):
        bench_all.main(["all", "--only", "nope"])
