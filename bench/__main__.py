"""`python -m bench all`: every benchmark, one after another, at the settings the docs quote,
then the generated tables.

Each benchmark runs as its own `python -m bench.<name>` process (they start brokers, jobs
and Spark sessions; one at a time, as this 2-core machine needs), writes its result under
`bench/results/`, and the run ends with `python -m bench.report --write`. `--quick` runs
each at smaller settings (fewer runs, smaller loads) to check that everything still runs;
its figures are written like any others, so rerun without it before quoting them.
`--only NAME …` runs some, `--stale` those whose result is stale (`bench.freshness`: after a
change, the reruns it calls for); `--list` prints the commands without running them. Prints how
long each took and the whole run, and exits 1 when any benchmark failed (the others still
run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from bench import freshness
from bench.catalog import BENCHMARKS, Benchmark


def command(benchmark: Benchmark, quick: bool) -> list[str]:
    return [sys.executable, *benchmark.command(quick)[1:]]


def chosen(only: Sequence[str], known: Mapping[str, Benchmark]) -> list[Benchmark]:
    unknown = [name for name in only if name not in known]
    if unknown:
        raise SystemExit(f"no benchmark named {', '.join(unknown)}; there are "
                         f"{', '.join(known)}")
    return [b for b in BENCHMARKS if not only or b.name in only]


def run(benchmarks: Sequence[Benchmark], quick: bool) -> int:
    failed: list[str] = []
    took: list[tuple[str, float]] = []
    started = time.monotonic()
    for benchmark in benchmarks:
        argv = command(benchmark, quick)
        print(f"\n=== {' '.join(argv[1:])}", flush=True)
        began = time.monotonic()
        if subprocess.run(argv, check=False).returncode != 0:
            failed.append(benchmark.name)
        took.append((benchmark.name, time.monotonic() - began))
    subprocess.run([sys.executable, "-m", "bench.report", "--write"], check=False)
    print("\nbenchmark            minutes")
    for name, seconds in took:
        print(f"{name:<20} {seconds / 60:7.1f}{'  FAILED' if name in failed else ''}")
    print(f"{'all':<20} {(time.monotonic() - started) / 60:7.1f}")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["all"], help="all: every benchmark (see --only)")
    parser.add_argument("--quick", action="store_true", help="smaller settings, a smoke run")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME",
                        help="these benchmarks only")
    parser.add_argument("--stale", action="store_true",
                        help="only those whose result is stale (`python -m bench.report --stale`)")
    parser.add_argument("--list", action="store_true", help="print the commands, run none")
    args = parser.parse_args(argv)
    if args.stale and args.quick:  # smoke figures would pass for fresh ones
        parser.error("--stale reruns at the settings the docs quote: not with --quick")
    benchmarks = chosen(args.only, {b.name: b for b in BENCHMARKS})
    if args.stale:
        stale = {found.name for found in freshness.stale()}
        benchmarks = [b for b in benchmarks if b.name in stale]
        if not benchmarks:
            print("nothing stale")
            return 0
    if args.list:
        for benchmark in benchmarks:
            print(" ".join(benchmark.command(args.quick)))
        return 0
    return run(benchmarks, args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
