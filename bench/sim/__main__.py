"""`python -m bench.sim`: every scenario under every policy; a table per scenario.

Prints the tables, writes the figures to `bench/results/sim.json` and the tables, with the
command that reproduces them, between the markers in `docs/simulation.md`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import record
from bench.report import stamp
from bench.sim import scenarios
from bench.sim.baselines import Backpressure, Threshold
from bench.sim.measures import Figures, figures
from bench.sim.policies import Ours, Policy, Static
from bench.sim.run import Scenario, simulate

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "simulation.md"
BEGIN, END = "<!-- sim:begin -->", "<!-- sim:end -->"

POLICIES: dict[str, Callable[[], Policy]] = {
    "ours": Ours, "static": Static, "threshold": Threshold, "backpressure": Backpressure,
}
COLUMNS = ("policy", "actions", "converge s", "peak backlog", "over target s",
           "resource-s", "direction changes", "final units")


def run_all(chosen: Sequence[Scenario]) -> list[Figures]:
    return [figures(simulate(scenario, make())) for scenario in chosen
            for make in POLICIES.values()]


def table(rows: Sequence[Figures]) -> str:
    cells = [COLUMNS] + [_cells(f) for f in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _cells(f: Figures) -> tuple[str, ...]:
    converge = "not converged" if f.converge_s is None else f"{f.converge_s:.0f}"
    return (f.policy, str(f.actions), converge, f"{f.peak_backlog:,}", f"{f.over_target_s:.0f}",
            f"{f.resource_s:,.0f}", str(f.direction_changes), "/".join(map(str, f.final_units)))


def tables(results: Sequence[Figures]) -> str:
    names = list(dict.fromkeys(f.scenario for f in results))
    return "\n\n".join(f"### {name}\n\n{table([f for f in results if f.scenario == name])}"
                       for name in names)


def write(results: Sequence[Figures], text: str, load_before: float) -> None:
    """The figures to `bench/results/sim.json`, stamped as every benchmark's are, and the
    tables with that stamp between the markers in `docs/simulation.md`."""
    path = record.write("sim", {"runs": [f.as_dict() for f in results]}, load_before, argv=[])
    doc = DOC.read_text()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    measured = stamp(json.loads(path.read_text()))
    DOC.write_text(f"{head}{BEGIN}\n\n{measured}\n\n{text}\n\n{END}{tail}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sim", description=__doc__)
    parser.add_argument("--no-write", action="store_true",
                        help="print the tables only; leave the JSON and the doc alone")
    args = parser.parse_args(argv)
    # The controller logs every decision; the tables are the output here.
    logging.getLogger("controller").setLevel(logging.ERROR)
    load_before = record.load_average()
    results = run_all(scenarios.all_scenarios())
    text = tables(results)
    print(text)
    if not args.no_write:
        write(results, text, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
