"""Every benchmark: its command at the settings the docs quote, a smaller smoke setting, and
the code its figures depend on.

Owns `BENCHMARKS`. Neighbours: `bench.__main__` (`python -m bench all` runs them),
`bench.freshness` (a result is stale once the code it measures changed), `bench.report`
(renders the commands beside the tables).
"""

from __future__ import annotations

from dataclasses import dataclass

_CONTROLLER = ("controller", "schemas")
_RUNTIME = ("streaming_jobs/runtime", "streaming_jobs/api.py", "streaming_jobs/config.py",
            "schemas")
_LOAD = ("streamctl/loadgen.py", "streamctl/profiles.py", "streamctl/cards.py",
         "streamctl/clicks.py")
"""The load generator: the producer every bed feeds its topics with, the rates, the records."""
_TAIL = ("streamctl/tail.py",)
_VIEW = (*_TAIL, "streamctl/view.py")
"""What reads a benchmark's figures off the metrics topic: its tail, and the query's view."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    """`python -m bench.<name>` writes `bench/results/<name>.json`."""
    full: tuple[str, ...]
    """Arguments at the settings the docs quote."""
    quick: tuple[str, ...]
    """Arguments for a smaller run that still goes through every path."""
    measures: tuple[str, ...]
    """The code its figures depend on (paths from the repository's root)."""

    def command(self, quick: bool = False) -> tuple[str, ...]:
        return ("python", "-m", f"bench.{self.name}", *(self.quick if quick else self.full))


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("sim", (), (), (*_CONTROLLER, "bench/sim")),
    Benchmark("day", (), ("--days", "2", "--day-s", "14400"),
              (*_CONTROLLER, "bench/sim", "bench/day/__init__.py", "bench/day/__main__.py",
               "bench/day/measures.py")),
    Benchmark("fleet", (), ("--quick",), (*_CONTROLLER, "bench/fleet.py")),
    Benchmark("fleet_processes", (), ("--quick",),
              (*_CONTROLLER, *_LOAD, *_TAIL, "bench/fleet_processes.py", "bench/bed.py")),
    Benchmark("takeover", ("--runs", "5"), ("--runs", "2"),
              (*_CONTROLLER, *_LOAD, *_VIEW, "bench/takeover.py", "bench/reaction.py",
               "bench/bed.py")),
    Benchmark("sink", ("--rows", "100", "2000", "20000", "--batches", "12"),
              ("--rows", "100", "2000", "--batches", "4"),
              ("streaming_jobs/runtime/sink", *_LOAD, "bench/sink.py", "bench/bed.py")),
    Benchmark("restart", ("--runs", "3"), ("--runs", "1"),
              (*_RUNTIME, *_LOAD, *_TAIL, "bench/restart.py", "bench/overhead.py",
               "bench/throughput.py", "bench/bed.py")),
    Benchmark("throughput", ("--parallelism", "2", "4", "8", "16"),
              ("--parallelism", "2", "8", "--records", "8000"),
              (*_RUNTIME, "streaming_jobs/jobs", *_LOAD, *_TAIL, "bench/throughput.py",
               "bench/bed.py")),
    Benchmark("fraud_partitions",
              ("--partitions", "2", "4", "8", "--records", "4000", "--cost-ms", "10"),
              ("--partitions", "2", "8", "--records", "2000", "--cost-ms", "10"),
              (*_RUNTIME, "streaming_jobs/jobs", *_LOAD, "bench/fraud_partitions.py",
               "bench/bed.py")),
    Benchmark("state_repartition", ("--keys", "1000000", "--to", "8"),
              ("--keys", "100000", "--to", "8"),
              (*_RUNTIME, *_LOAD, *_TAIL, "bench/state_repartition.py", "bench/throughput.py",
               "bench/bed.py")),
    Benchmark("overhead", ("--records", "48000", "--runs", "4"),
              ("--records", "12000", "--runs", "2"),
              (*_RUNTIME, *_LOAD, *_TAIL, "bench/overhead.py", "bench/throughput.py",
               "bench/bed.py")),
    Benchmark("pauses", ("--runs", "3"), ("--runs", "1"),
              (*_RUNTIME, *_LOAD, *_TAIL, "bench/pauses.py", "bench/bed.py")),
    Benchmark("failover", ("--runs", "3"), ("--runs", "1"),
              (*_CONTROLLER, *_RUNTIME, *_LOAD, *_VIEW, "bench/failover.py", "bench/reaction.py",
               "bench/bed.py")),
    Benchmark("shedding", ("--runs", "1"), ("--runs", "1"),
              (*_CONTROLLER, *_RUNTIME, "streaming_jobs/jobs", *_LOAD, *_VIEW,
               "bench/shedding.py", "bench/reaction.py", "bench/bed.py")),
    Benchmark("cluster_faults", ("--runs", "3"), ("--runs", "1"),
              (*_RUNTIME, "streaming_jobs/jobs", "streamctl/stack", *_LOAD, *_TAIL,
               "bench/cluster_faults.py", "bench/bed.py")),
    Benchmark("demo", ("--runs", "3"), ("--runs", "1"),
              (*_CONTROLLER, *_RUNTIME, "streaming_jobs/jobs", "streamctl/demo.py",
               "streamctl/narrate.py", *_LOAD, *_VIEW, "streamctl/stack", "streamctl/cli.py",
               "bench/demo.py")),
    Benchmark("containers", ("--runs", "3"), ("--runs", "1"),
              (*_CONTROLLER, *_RUNTIME, "streaming_jobs/jobs", "streamctl", "Dockerfile",
               "docker-compose.yml", "deploy", "bench/compose", "bench/containers.py")),
    Benchmark("day.real", (), ("--days", "1", "--day-s", "180"),
              (*_CONTROLLER, *_RUNTIME, "examples/clickstream", *_LOAD, *_VIEW, "bench/sim",
               "bench/day", "bench/bed.py")),
    Benchmark("reaction", ("--runs", "1", "--by-hand", "4", "8", "16"), ("--runs", "1"),
              (*_CONTROLLER, *_RUNTIME, "streaming_jobs/jobs", "streaming_jobs/send_cli.py",
               *_LOAD, *_VIEW, "bench/reaction.py", "bench/bed.py")),
)
"""In order of cost, cheapest first: a broken environment fails early."""
