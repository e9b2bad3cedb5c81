"""`python -m bench.report`: the measured figures of `bench/results/*.json` as tables.

Prints the tables (`--write` also puts them between the markers of `docs/benchmarks.md`;
`--check` exits 1 when that file is not what the results render to, which a test runs;
`--stale` lists the results older than the code they measure, `bench.freshness`).
Every table says when, on what machine and by which command its figures were measured, as the
result file records it (`bench.record`); figures are only ever written here, never by hand,
so a rerun of a benchmark and one `--write` bring the documentation up to date.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import freshness
from bench.catalog import BENCHMARKS
from bench.reaction import BY_HAND_AFTER_S, CHANGE_AT_S, SCENARIOS
from bench.record import RESULTS_DIR
from controller.settings import ModelSettings

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
BEGIN = "<!-- bench-report:begin (generated: python -m bench.report --write) -->"
END = "<!-- bench-report:end -->"

Result = Mapping[str, Any]


def stamp(result: Result) -> str:
    """When, on what and how: one line under each table's heading."""
    machine = result.get("machine")
    if isinstance(machine, Mapping):
        where = (f"{machine['arch']}, {machine['cpus']} cores, {machine['memory_gib']} GiB, "
                 f"Python {machine['python']}; 1-minute load average "
                 f"{machine['load_average_1m_before']:.1f} before, "
                 f"{machine['load_average_1m_after']:.1f} after"
                 + (f"; reference loop {machine['reference_loop_ms']:.0f} ms"
                    if "reference_loop_ms" in machine else ""))
    else:
        where = f"{machine or 'a machine not recorded'} (cores, memory and load not recorded)"
    when = result.get("measured_at")
    how = f"by `{result['command']}`" if "command" in result else "by a command not recorded"
    if result.get("commit"):
        how += f" at commit `{result['commit']}`"
    if when is None:
        return (f"Measured on {where}, {how}; the date was not recorded (the file predates "
                "`bench.record`): rerun it to stamp it.")
    return f"Measured {when} on {where}, {how}."


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def pauses(result: Result) -> list[str]:
    cold = result["cold_restart_median_s"]
    rows = []
    for a in result["actions"]:
        applied = sum(o == "applied" for o in a["outcomes"])
        sent = f"{applied} / {len(a['outcomes'])}"
        if a["median_s"] is None:
            rows.append([a["parameter"], sent, "—", "—", f"{a['outcomes'][-1]}: {a['detail']}"])
        else:
            rows.append([a["parameter"], sent, f"{a['median_s']:.1f}",
                         f"{min(a['pauses_s']):.1f}–{max(a['pauses_s']):.1f}",
                         f"{a['median_s'] / cold:.2f}×"])
    spread = result["cold_restart_s"]
    rows.append(["cold restart (new process)", str(len(spread)), f"{cold:.1f}",
                 f"{min(spread):.1f}–{max(spread):.1f}", "1.00×"])
    return _table(["action", "applied / sent", "median pause s", "min–max s",
                   "vs cold restart"], rows)


def throughput(result: Result) -> list[str]:
    runs = result["runs"]
    base = runs[0]["throughput_per_s"]
    return [f"Enrichment cost {result['enrichment_cost_ms']} ms per record.", "",
            *_table(["input parallelism", "records/s", "vs first", "median batch s",
                     "start to first commit s"],
                    [[str(r["parallelism"]), f"{r['throughput_per_s']:.0f}",
                      f"{r['throughput_per_s'] / base:.2f}×", f"{r['median_batch_s']:.2f}",
                      f"{r['start_to_first_commit_s']:.1f}"] for r in runs])]


def fraud_partitions(result: Result) -> list[str]:
    runs = result["runs"]
    base = runs[0]["scored_per_s"]
    moved = result["repartition"]
    return [f"Scoring call {result['cost_ms']} ms per transaction.", "",
            *_table(["state partitions", "per batch", "median batch s", "scored/s",
                     "vs first"],
                    [[str(r["state_partitions"]), str(r["records_per_batch"]),
                      f"{r['median_batch_s']:.2f}", f"{r['scored_per_s']:.1f}",
                      f"{r['scored_per_s'] / base:.2f}×"] for r in runs]),
            "", f"Offline repartition {moved['from']} → {moved['to']} state partitions: "
                f"{moved['duration_ms'] / 1000:.1f} s."]


def state_repartition(result: Result) -> list[str]:
    moved, kept = result["restarts"]
    repartition_s = result["repartition_ms"] / 1000
    return [f"{result['state_rows']:,} state rows (built in {result['build_s']:.0f} s).", "",
            *_table(["step", "s"], [
                [f"offline repartition {result['from']} → {result['to']}", f"{repartition_s:.2f}"],
                *([f"restart at {r['state_partitions']} state partitions → first commit",
                   f"{r['start_to_first_commit_s']:.2f}"] for r in (moved, kept)),
                ["repartition + restart (a state_partitions pause, less its quiesce)",
                 f"{repartition_s + moved['start_to_first_commit_s']:.2f}"]])]


def sink(result: Result) -> list[str]:
    runs = result["runs"]
    old = {r["rows_per_batch"]: r for r in runs if r["writer"] == "at-least-once"}
    return _table(["rows per batch", "writer", "median ms", "p90 ms", "rows/s",
                   "vs at-least-once"],
                  [[str(r["rows_per_batch"]), r["writer"], f"{r['median_batch_ms']:.0f}",
                    f"{r['p90_batch_ms']:.0f}", f"{r['rows_per_s']:.0f}",
                    f"{r['median_batch_ms'] / old[r['rows_per_batch']]['median_batch_ms']:.2f}×"]
                   for r in runs])


def overhead(result: Result) -> list[str]:
    runs = result["runs"]
    return [f"Enrichment cost {result['enrichment_cost_ms']} ms per record, "
            f"{result['batch_cap']}-record batches"
            f"{', back to back' if result.get('trigger_s', 1) < 1 else ''}; runtime / bare, "
            "medians: "
            f"**{result['ratio']:.3f}×**.", "",
            *_table(["mode", "batches", "median batch s", "rows/s"],
                    [[r["mode"], str(r["batches"]), f"{r['median_batch_s']:.2f}",
                      f"{r['rows_per_s']:.0f}"] for r in runs])]


def reaction(result: Result) -> list[str]:
    targets = result["targets"]

    def figure(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    return [*_table(
        ["scenario", "runs", "tuples per run (target)", "change → tuple s (≤ 5)",
         "tuple → applied s", "pause s", "change → lag back s (≤ 40)", "change → caught up s",
         "change → sized s (down, idle: ≤ 180)", "measured (UTC)"],
        [[r["scenario"], str(r["runs"]), f"{', '.join(map(str, r['tuples']))} "
          f"({targets['tuples'][r['scenario']]})", figure(r["change_to_tuple_s"]),
          figure(r["tuple_to_applied_s"]), figure(r["pause_s"]),
          figure(r["change_to_recovered_s"]), figure(r.get("change_to_caught_up_s")),
          figure(r.get("change_to_sized_s")),
          str(r.get("measured_at") or result.get("measured_at") or "—")]
         for r in result["summary"]]), *_by_hand(result, figure)]


STEP_HIGH_S = SCENARIOS["step"](1.0)[1] - CHANGE_AT_S
"""How long `bench.reaction`'s step holds its high load after the change."""


def _by_hand(result: Result, figure: Callable[[float | None], str]) -> list[str]:
    """The step with its size set by the benchmark (`--by-hand`), beside the controller's."""
    rows = result.get("by_hand", [])
    if not rows:
        return []
    chosen = sorted({r["targets"][0] for r in result["all_runs"]
                     if r["scenario"] == "step" and r["targets"]}, key=int)
    return ["", "The step again without a controller, the benchmark sending the tuple that "
            f"sets the units itself (published {BY_HAND_AFTER_S:.0f} s after the change, the "
            f"controller's own time to its tuple), with batches of "
            f"{result['batch_cap'] // 2:,} records a unit: what each size does on this "
            f"machine (`--by-hand UNITS …`; each row says when it was measured). The "
            f"controller chose {', '.join(chosen) or 'no size'} units in the step above. The "
            f"high load stops {STEP_HIGH_S:.0f} s after the change: a size caught up only then "
            "never kept up while it lasted. A run whose tuple the job did not apply counts in "
            "runs, not in applied, and has no figures.",
            "",
            *_table(["units set by hand", "runs", "applied", "change → tuple s",
                     "tuple → applied s", "pause s", "change → lag back s (≤ 40)",
                     "change → caught up s", "measured (UTC)"],
                    [[str(r["units"]), str(r["runs"]), str(r["applied"]),
                      figure(r["change_to_tuple_s"]), figure(r["tuple_to_applied_s"]),
                      figure(r["pause_s"]), figure(r["change_to_recovered_s"]),
                      figure(r["change_to_caught_up_s"]), r["measured_at"]]
                     for r in rows])]


def failover(result: Result) -> list[str]:
    def row(name: str, values: Sequence[float], target: str) -> list[str]:
        ordered = sorted(values)
        median = ordered[len(ordered) // 2] if len(ordered) % 2 else (
            (ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2)
        return [name, str(len(values)), f"{median:.1f}", f"{ordered[0]:.1f}–{ordered[-1]:.1f}",
                target]

    cold = result["cold_restarts"]
    warm = [r for r in result["failovers"] if r.get("standby", "warm") == "warm"]
    hot = [r for r in result["failovers"] if r.get("standby") == "hot"]
    rows = [
        row("kill -9 → failover decision", [r["kill_to_decision_s"] for r in warm + hot], "≤ 3"),
        row("kill -9 → promoted warm standby's first commit",
            [r["kill_to_first_commit_s"] for r in warm], f"≤ {result['target_s']:g}"),
        row("the warm promotion's pause (its ack)", [r["ack_pause_s"] for r in warm], "")]
    if hot:
        rows += [row("kill -9 → promoted hot standby's first commit",
                     [r["kill_to_first_commit_s"] for r in hot], f"≤ {result['target_s']:g}"),
                 row("the hot promotion's pause (its ack)", [r["ack_pause_s"] for r in hot], "")]
    rows += [
        row("kill -9 → restarted process's first commit (no standby)",
            [r["kill_to_first_commit_s"] for r in cold], "≤ 20"),
        row("… process start to its SparkSession", [r["to_session_s"] for r in cold], ""),
        row("… the SparkSession", [r["session_s"] for r in cold], ""),
        row("… the query's start (checkpoint, plan)", [r["query_start_s"] for r in cold], ""),
        row("… its first batch, to the commit", [r["first_batch_s"] for r in cold], "")]
    table = _table(["figure", "runs", "median s", "min–max s", "target"], rows)
    costs = result.get("costs", [])
    if not costs:
        return table
    return [*table, "", *_table(
        ["standby", f"its CPU over {result['cost_window_s']:g} s, cores", "its memory, MiB",
         "the active's CPU, cores", "the active's memory, MiB"],
        [[c["standby"], f"{c['standby_usage']['cpu_cores']:.2f}",
          f"{c['standby_usage']['rss_mib']:.0f}", f"{c['active_usage']['cpu_cores']:.2f}",
          f"{c['active_usage']['rss_mib']:.0f}"] for c in costs])]


def shedding(result: Result) -> list[str]:
    def figure(value: float | None, unit: str = "") -> str:
        return "—" if value is None else f"{value:.1f}{unit}"

    return _table(
        ["run", "C records/s", "overload → shed tuple s", "→ applied s", "fraction set",
         "backlog growth before, records/s", "with shedding, records/s",
         f"load fall → shedding off s (≤ {result['scale_down_stabilisation_s']:g})",
         "fractions set", "scale-downs before it was off", "rows shed"],
        [[str(n + 1), f"{r['capacity_per_s']:.0f}", figure(r["overload_to_shed_s"]),
          figure(r["shed_to_applied_s"]),
          "—" if r["first_fraction"] is None else f"{r['first_fraction']:g}",
          figure(r["growth_before_per_s"]), figure(r["growth_shed_per_s"]),
          figure(r["fall_to_off_s"]), " → ".join(f"{f:g}" for f in r["fractions"]) or "—",
          str(r["scale_downs_before_off"]), str(r["rows_shed"])]
         for n, r in enumerate(result["runs"])])


def cluster_faults(result: Result) -> list[str]:
    what = {"input": "the broker leading both input partitions",
            "control": "the broker leading the control and ack topics, a tuple in flight",
            "coordinator": "the sink's transaction coordinator, during a state partitions "
                           "change"}

    def figure(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    return _table(["kill -9 of", "runs", "kill → first commit s", "kill → the tuple's ack s",
                   "restart → back in every ISR s"],
                  [[what[r["fault"]], str(r["runs"]), figure(r["to_first_commit_s"]),
                    figure(r["to_ack_s"]), figure(r["back_in_sync_s"])]
                   for r in result["summary"]])


def demo(result: Result) -> list[str]:
    def figure(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    job, runs = result["job"], result["runs"]
    rows = [[str(n), figure(r["step_to_tuple_s"]), figure(r["step_to_applied_s"]),
             figure(None if r["pause_ms"] is None else r["pause_ms"] / 1000),
             figure(r["recovered_s"][job]) if r["fell_behind"][job] else "never behind",
             "; ".join(f"{t['change'].replace(' -> ', ' → ')} at {t['at_s']:+.0f} s"
                       for t in r["tuples"]) or "none",
             str(r["parallelism"][job])]
            for n, r in enumerate(runs, 1)]

    def median(name: str) -> str:
        m = result["median"][name]
        return figure(m["median"]) + ("" if m["runs"] == len(runs)
                                      else f" ({m['runs']} of {len(runs)} runs)")
    rows.append(["median", median("step_to_tuple_s"), median("step_to_applied_s"),
                 median("pause_s"), median("step_to_lag_back_s"),
                 f"{median('tuples_after_step')} after the step", ""])
    return _table(["run", "step → first tuple s", "step → that tuple applied s", "its pause s",
                   "step → lag back s", "tuples (s from the step)", "units at the end"], rows)


def _executors_note(detail: str) -> str:
    """An ack's last note before its explanation: what the cluster gave, for `executors`."""
    return detail.split(":")[0].split(";")[-1].strip()


def containers(result: Result) -> list[str]:
    rows = [[str(n), f"{r['up_s']:.1f}", f"{r['capacity_per_s']:,.0f}",
             f"{r['step_to_tuple_s']:.1f}", f"{r['step_to_applied_s']:.1f}",
             f"{r['applied']} ({_executors_note(r['applied_detail'])})",
             f"{r['crash_to_failover_s']:.1f}", f"{r['crash_to_first_batch_s']:.1f}"]
            for n, r in enumerate(result["runs"], 1)]
    m = result["median"]
    rows.append(["median", f"{m['up_s']:.1f}", "", f"{m['step_to_tuple_s']:.1f}",
                 f"{m['step_to_applied_s']:.1f}", "", f"{m['crash_to_failover_s']:.1f}",
                 f"{m['crash_to_first_batch_s']:.1f}"])
    return _table(["run", "up → job on the cluster s", "capacity C records/s",
                   "step → first tuple s", "step → that tuple applied s",
                   "its change (its ack)",
                   "crash → failover decision s", "crash → promoted standby's batch s"], rows)


def takeover(result: Result) -> list[str]:
    runs = result["kill_to_takeover_s"]
    return _table(["figure", "runs", "median s", "min–max s", "lease session s"], [[
        "kill -9 of the leading controller → a follower leads", str(len(runs)),
        f"{result['median_s']:.1f}", f"{min(runs):.1f}–{max(runs):.1f}",
        f"{result['lease_session_s']:g}"]])


def restart(result: Result) -> list[str]:
    what = {"same": "same parallelism (2 → 2)", "cold": "2 → 16, cold workers",
            "warm": "2 → 16, workers warmed first"}
    return _table(
        ["restart", "runs", "start → first commit s", "first batch s", "second batch s",
         "first batch's addBatch ms", "warming s (before the stop)"],
        [[what.get(r["scenario"], r["scenario"]), str(r["runs"]),
          f"{r['start_to_first_commit_s']:.1f}", f"{r['first_batch_s']:.1f}",
          f"{r['second_batch_s']:.1f}", str(r["phases_ms"]["addBatch"]),
          "—" if r["warm_s"] is None else f"{r['warm_s']:.1f}"] for r in result["summary"]])


def fleet(result: Result) -> list[str]:
    rows = [[f"{r['queries']} × {r['partitions']}", f"{r['cpu_ms_per_cycle_mean']:.1f}",
             f"{r['cpu_ms_per_cycle_p99']:.1f}", f"{r['cpu_ms_per_query_per_cycle']:.3f}",
             f"{r['cycle_share']:.0%}", f"{r['memory_kib_per_query']:.0f}",
             str(r["metrics_bytes_per_query_per_s"])] for r in result["rows"]]
    return [*_table(["queries × partitions", "CPU ms per cycle (mean)", "p99",
                     "CPU ms per query per cycle", "share of the 0.5 s cycle",
                     "memory KiB per query", "metrics bytes per query per s"], rows), "",
            f"One instance keeps about {result['sustainable_queries_8_partitions']} queries of 8 "
            "partitions within half its cycle (the other half is the broker's and the poll's); "
            f"`--max-queries` defaults to {ModelSettings().max_queries}.", "",
            *_collectors(result.get("collectors")), *_shared(result.get("shared", []))]


def _collectors(found: dict[str, Any] | None) -> list[str]:
    """The controller's garbage collector against Python's default, side by side."""
    if found is None:
        return []
    return [f"With Python's default garbage collector the cycle costs {found['default_ms']:.3f} "
            f"ms per query at {found['queries']} × {found['partitions']}, with the one "
            f"`controller run` sets {found['tuned_ms']:.3f} ({found['ratio']}×; each in its "
            f"own process, alternating, {found['runs']} runs each).", ""]


SATURATED = 0.9
"""Share of a core past which a controller process is taken as saturated: its cycles stretch,
so its CPU per query stops meaning a cost."""


def fleet_processes(result: Result) -> list[str]:
    def figure(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    load = (f"Each query's batch cap {result['cap_share']:g}× what arrives in a trigger; behind, "
            f"each record costs {result['behind_cost']:g}× as much; {result['warm_s']:g} s of "
            f"warm-up, {result['measured_s']:g} s measured.")
    return [load, "", *_table(
        ["queries × partitions", "records/s in", "instances", "busiest CPU ms per 0.5 s",
         "per query (unsaturated)", "share of a core", "memory KiB per query",
         "metrics bytes per query per s", "fleet's triggers on time",
         f"decided within {result['decide_s']:g} s",
         "behind → tuple p50 s", "p99 s", "units given p50 (needed busy all the time)",
         "kill -9 → its shards led s"],
        [[f"{r['queries']} × {r['partitions']}", str(r["rate_per_s"]), str(r["instances"]),
          f"{r['cpu_ms_per_cycle']:.1f}",
          _per_query(r),
          f"{r['core_share']:.0%}", f"{r['memory_kib_per_query']:.0f}",
          str(r["metrics_bytes_per_query_per_s"]), f"{r['fleet_on_time']:.0%}",
          f"{r['decided']} of {r['queries']}",
          figure(r["tuple_p50_s"]), figure(r["tuple_p99_s"]),
          f"{figure(r['units_asked_p50'])} ({r['units_needed']})",
          figure(r["takeover_s"])]
         for r in result["rows"]])]


FLEET_SHORT = 0.9
"""Share of its triggers the synthetic fleet published on time below which the controllers
had less to read than jobs would send, so their CPU per query understates the cost."""


def _per_query(row: dict[str, Any]) -> str:
    """A fleet_processes row's CPU per query, where it means one."""
    if row["core_share"] >= SATURATED:
        return "saturated"
    if row["fleet_on_time"] < FLEET_SHORT:
        return "fleet short of CPU"
    return f"{row['cpu_ms_per_query_per_cycle']:.3f}"


def _shared(rows: list[dict[str, Any]]) -> list[str]:
    """The fleet divided among instances (`bench.fleet.measure_shared`)."""
    if not rows:
        return []
    first = rows[0]
    one = first["cpu_ms_per_cycle_mean"]
    return [f"{first['queries']} queries × {first['partitions']} partitions divided into "
            f"{first['shards']} shards among instances, each reading only its shards' metrics, "
            "in one run: the busiest instance's CPU per cycle, and how many queries got "
            "exactly one control tuple once every query fell behind:", "",
            *_table(["instances", "busiest instance's CPU ms per cycle (mean)",
                     "over one instance", "queries decided once"],
                    [[str(r["instances"]), f"{r['cpu_ms_per_cycle_mean']:.1f}",
                      f"{r['cpu_ms_per_cycle_mean'] / one:.2f}",
                      f"{r['decided_once']} of {r['queries']}"] for r in rows])]


def day(result: Result) -> list[str]:
    rows = [[run["shape"], run["policy"], str(d), job["query_id"], str(job["reconfigurations"]),
             str(job.get("scale_ups_before_backlog", "—")),
             str(job["reversals"]), f"{job['over_oracle']:.0%}",
             f"{job['over_objective_share']:.2%}"]
            for run in result["runs"] for d, jobs in enumerate(run["days"], 1) for job in jobs]
    return _table(["days", "controller", "day", "job", "reconfigurations (≤ 6)",
                   "of them scale-ups before a backlog", "reversals within 10 min (0)",
                   "unit-s over the oracle (≤ 15 %)",
                   f"time over the {result['objective_s']:g} s delay objective (≤ 1 %)"], rows)


def day_real(result: Result) -> list[str]:
    rows = [[str(d), job["query_id"], str(job["reconfigurations"]),
             str(job["scale_ups_before_backlog"]), str(job["reversals"]),
             f"{job['over_oracle']:.0%}", f"{job['over_objective_share']:.2%}"]
            for d, jobs in enumerate(result["days_measured"], 1) for job in jobs]
    calm = [name for name, never in result["never_behind"].items() if never]
    tuples = [[f"{t['at_s']:.0f}", t["query_id"], t["change"], str(t["backlog"]),
               str(t["reason"]).split(";")[0]] for t in result["tuples"]]
    return [*_table(["day", "job", "reconfigurations", "of them scale-ups before a backlog",
                     f"reversals within {result['reversal_s']:g} s",
                     "unit-s over the oracle (≤ 15 %)",
                     f"time over the {result['objective_s']:g} s delay objective (≤ 1 %)"],
                    rows), "",
            f"Restarts of a job that never fell behind (its backlog never over the policy's "
            f"floor): **{result['restarts_never_behind']}** of {len(result['tuples'])} "
            f"(target 0; jobs that never fell behind: {', '.join(calm) or 'none'}). Measured "
            "capacities at 2 units: " + ", ".join(
                f"{name} {rate:,.0f}/s" for name, rate in result["capacities_per_s"].items())
            + ".", "",
            *_table(["s from the load's start", "job", "tuple",
                     "its backlog then (lag less the batches in flight)",
                     "why (the reason's first clause)"], tuples)]


SECTIONS: tuple[tuple[str, str, Callable[[Result], list[str]], str], ...] = (
    ("reaction", "Reaction to a step, a spike, a ramp and a fallen load", reaction,
     "The real sensor job (2 units, 1 s trigger, 5 ms per record) and the real controller on "
     "a local broker; loads relative to the job's capacity C measured first: a step from "
     "0.4 C to 3 C, a 3 s spike to 6 C, a ramp from 0.4 C to 3 C over 90 s; down and idle "
     "start the job at 16 units with a 4 s trigger, under a constant tenth of C there, or no "
     "input at all, for 240 s from the controller's start (their change; it reads the "
     "metrics from their start, the calibration included). Medians over the runs; times "
     "from the load change, as the benchmark saw the decision and the ack arrive; \"lag "
     "back\" is the first batch after the applied tuple whose lag, in seconds behind the "
     "input (records over the load's rate then), is at most the highest of the 10 s before "
     "the change (in records, what arrives during a batch at the step's 3 C is 7.5 times "
     "what did at 0.4 C), \"caught up\" the first batch after the applied tuple "
     "that left nothing at the broker when it was planned (the controller's own measure of "
     "a backlog); \"sized\" is the last tuple's ack. A run of some scenarios "
     "(`--scenarios`) replaces their rows and keeps the others: each row says when it was "
     "measured, the heading when and by which command the newest was."),
    ("failover", "Failover after kill -9 of the active", failover,
     "The real sensor job (stateful: windows per sensor) as an active instance and a warm "
     "standby on one checkpoint, the "
     "real controller with its defaults (beats every 1 s, lost after 2.5 s without one) and "
     "a constant load; each run kills the active with SIGKILL and times, from each record's "
     "own stamp, the controller's failover decision, the promoted instance's first batch "
     "with rows, and the promotion's ack. The killed instance comes back as the next "
     "standby. Without a standby, the same kill followed at once by a new process under the "
     "killed instance's id on the same checkpoint (a supervisor's restart), timed to its "
     "first batch with rows and split (… rows) from the restarted process's own log: the "
     "process up to its SparkSession, the session (JVM and Spark context), the query's start "
     "(checkpoint, input, plan) and its first batch, cold (Python workers, Kafka consumers, "
     "state store, generated code), to its commit. Then the same query with hot standbys "
     "(`--standby hot`: the standby runs the query on its own checkpoint into nothing, "
     "behind the active's commits) and the same failovers. Each kind of standby's CPU (its "
     "process group's, JVM and Python workers included) and resident memory are sampled once "
     "it is ready, beside its active's over the same window. The load generator, the broker "
     "and the controller share the machine's 2 cores with them."),
    ("cluster_faults", "Broker kill -9 on a three-node cluster", cluster_faults,
     "A local three-node KRaft cluster (every topic three replicas, `min.insync.replicas` 2), "
     "the real "
     "fraud-detection job (2 state partitions, 1 s trigger) under 100 card transactions/s, no "
     "controller (the benchmark signs and sends the tuples). Each run returns the cluster to "
     "the topics' layout (input led by node 1, control and acks by node 2, every replica in "
     "sync), kills one broker with SIGKILL and times, from the kill, the end of the first "
     "batch with rows started after it and the tuple's ack, then the killed node's return to "
     "every in-sync replica set after its restart. Medians over the runs; "
     "tests/faults/test_cluster_faults.py checks that the same faults lose and duplicate "
     "nothing ([guarantees.md](guarantees.md#one-broker-or-a-cluster))."),
    ("demo", "The demo's load step", demo,
     "`streamctl demo` with its defaults, as `./dev demo` runs it: the local broker, the "
     "bundled sensor job (2 units, 5 ms per record) and the controller as separate processes, "
     "150 records/s stepping to 900 records/s 30 s into 150 s of load. Figures from each "
     "run's own narration ([demo.md](demo.md)): times from the step as the demo saw the "
     "decision and the ack arrive; \"lag back\" is the first status line (every 3 s) whose "
     "lag, in seconds of input, is within 1.5 times its level before the step (at least 3 s) "
     "after it had fallen behind."),
    ("containers", "docker-compose.yml in containers", containers,
     "Each run brings `docker-compose.yml` up fresh in a Docker engine on this machine, as "
     "`./dev test-containers` does ([deploy.md](deploy.md#in-containers-dev-test-containers)):"
     " the project image, with stand-ins for the official images this machine cannot pull; "
     "the broker, a Spark master and two workers, the sensor job and its warm standby, two "
     "controller instances and Prometheus. The job's capacity C is measured first (a burst of "
     "four full batches); then a step from 0.4 C to 3 C, and, under 0.3 C, SIGKILL of the "
     "active job's process from the host (a crash). Times from the change to each record's "
     "own stamp (the containers share the machine's clock); \"up\" runs from `compose up` to "
     "the job's application holding its executors. An `executors` tuple is acked once the "
     "executors run, or after the job waited 90 s for them when the two workers have no room "
     "(the request stands; its ack says which). Everything shares the 2 cores."),
    ("takeover", "Controller takeover after kill -9 of the leader", takeover,
     "Two `controller run` processes with their defaults on a local broker; each run waits "
     "until the follower has joined the controllers' group, kills the leader with SIGKILL and "
     "times the follower's takeover record from its own stamp: the broker ends the dead "
     "member's lease session, the lease partition moves, and the new leader fences the old "
     "one's writes and reads back what was in flight. The killed instance comes back as the "
     "next follower."),
    ("shedding", "Shedding at the ceiling", shedding,
     "The real sensor job (2 units, 1 s trigger, 5 ms per record) with 60 % of its sensors low "
     "priority and a bound on shedding of 0.9, and the real controller with a ceiling of 2 "
     "units, on a local broker; loads relative to the job's capacity C measured first: 0.4 C "
     "for 20 s, 2 C for 120 s, then 0.3 C for 180 s. Times from the load's changes, as the "
     "benchmark saw the decisions and acks arrive; the backlog's growth is the least-squares "
     "slope of the lag from the overload to the shedding applied, and from 10 s after that "
     "to the fall. Shedding all it may leaves 0.92 C to process, less the per-batch "
     "overhead, so the controller also advises a throttle."),
    ("day", "Days of a day-shaped load (simulated)", day,
     "The simulator (`bench.sim`) runs the real control loop, deciding every 5 simulated "
     "seconds, over a two-job pipeline: a first job at the bundled job's measured cost and a "
     "costlier second one on half its output, both stating a 30 s delay objective. Each day "
     "of the load rises from a quarter of its peak at its start to the peak half a day later "
     "and back, smoothly, or, in an office's days, from a quiet night to 80 % of the peak "
     "within minutes a third of the day in; with ±10 % noise per second, 5 % more every day "
     "and a 2.5× flash crowd for 10 minutes on the second day; the same load for both "
     "controllers: reacting only "
     "(`--no-anticipate`) and "
     "with its defaults, which learn the repeating load and size ahead of it. The oracle "
     "knows each second's load and takes the fewest units whose batches keep a record "
     "within the objective, reconfiguring and raising the batch cap (up to the jobs' limit) "
     "for free: a lower bound no controller reaches (`bench/day/measures.py`). A scale-up "
     "comes before a backlog when the job's backlog as the policy counts it (what a batch "
     "left behind, and what arrived more than a trigger interval after it was planned) stayed "
     "within the policy's noise floor for the minute before it (the model's window). "
     "Targets are issue 35's."),
    ("day.real", "Days of a day-shaped load (real jobs, compressed days)", day_real,
     "The same columns on the real controller and two real jobs of the clickstream example on "
     "a local broker, each day compressed to minutes: `click-enrich` (5 ms per click, 2 "
     "units) feeding `click-sessions` (0.5 ms per click, 2 state partitions), both stating a "
     "30 s delay objective, their capacities measured first. The load is the simulated smooth "
     "day scaled to the first job's capacity C (1.5 C at the peak, a quarter of that at "
     "night, ±10 % noise, 5 % more each day) after a minute at the night's rate; the "
     "controller runs its defaults with the season compressed to the day (buckets of a 96th "
     "of it, periods of half a day to 1.25 days, a 30 s lead). A change undone within an "
     "eighth of the day is a reversal; a backlog is the lag less what arrived in the last "
     "two trigger intervals (the batches in flight), and a scale-up comes before one as in "
     "the simulation (within the floor for the minute before it, real seconds). The oracle "
     "takes each job's measured rate per unit with no per-batch cost; it reconfigures for "
     "free. The jobs, the controller, the load generator and the broker share the 2 cores."),
    ("pauses", "Reconfiguration pauses", pauses,
     "Sensor job under a constant load, each action forth and back. The pause of a restart "
     "runs from the later of the last commit before the change and the change's start to the "
     "commit of the first batch after it (the ack's `pause_ms`: quiesce, restart in the same "
     "warm driver, and that first batch, often the replay of the one the gate held back); "
     "`output_topic`, `shed_fraction` and `udf_version` are swapped at a batch boundary "
     "without a restart, their pause is the time new batches were held. `state_partitions` "
     "includes Spark's offline state repartitioning; `input_topic` moves the load first, and "
     "the drain of the old topic runs while the query runs. A cold restart is SIGTERM and a "
     "new `streamctl job run` on the same checkpoint: from the old process's last commit to "
     "the new one's first."),
    ("restart", "A restarted query's first batch", restart,
     "The sensor job's plan in one SparkSession (local[16]) over a preloaded backlog, "
     "batches of 1 500, 5 ms per record: three batches at parallelism 2, a stop, a start from "
     "the checkpoint; times from Spark's own progress of the restarted query. Medians over "
     "the runs; docs/restarts.md reads them."),
    ("throughput", "The sensor job's capacity by input parallelism", throughput,
     "The same preloaded backlog per run, the real job process on a local broker; rows of "
     "the batches after the first over their time. The lookup is latency, not CPU, so more "
     "tasks in flight raise capacity on 2 cores; each batch also carries Spark's fixed "
     "overhead, which is why the scaling is below linear."),
    ("fraud_partitions", "The fraud job's capacity by state partitions", fraud_partitions,
     "The registered plan run availableNow on the same preloaded transactions, RocksDB state "
     "store; median of the batches after the first (which opens a state store per "
     "partition)."),
    ("state_repartition", "A state partitions change with a large state", state_repartition,
     "The sensor job's plan (RocksDB state store) run availableNow into nothing over one "
     "reading per sensor in one open window, so that every sensor is a state row; the "
     "checkpoint copied, one copy repartitioned offline, then both restarted over 1 000 more "
     "readings in one SparkSession, each timed from `start()` to its first commit. The "
     "runtime's pause for a `state_partitions` change is the quiesce (the running batch) "
     "plus the last row."),
    ("sink", "The exactly-once sink's cost", sink,
     "Spark's own Kafka writer (at-least-once) and the transactional sink on the same cached "
     "batches, alternating batch by batch; the first batch of each is warm-up."),
    ("fleet", "What one controller instance costs per query", fleet,
     "The production control cycle (collect → settle → decide → act, with its observers: "
     "Prometheus and the live page's timeline; its garbage collector tuned as `controller run` "
     "tunes it) over in-memory ports and a fake clock stepped "
     "by the default 0.5 s cycle, for "
     "N steady queries of P partitions publishing one batch a second, with end offsets that "
     "grow with every record, probed every cycle, each fleet in a fresh process; CPU by the "
     "process's own clock around each cycle, memory by tracemalloc from an empty controller "
     "to one with a full window of every query. Broker round trips are not in it."),
    ("fleet_processes", "Controller processes under a synthetic fleet", fleet_processes,
     "`controller run` processes with their defaults (four shards; the query limit raised to "
     "the fleet's size) on a local broker, driven by N synthetic queries of P partitions that "
     "this benchmark publishes as jobs would: a batch a second each, all reading one input "
     "topic of P partitions it produces to, so the end offsets the controllers probe agree "
     "with the batches. The queries keep up (busy half of each second, reading all that "
     "arrived, under their batch cap) through the warm-up and the measured span; then what "
     "each record costs rises in all at once, and each runs as Spark would: batches back to "
     "back past the trigger, each reading all that waits up to the cap (prorated over the "
     "partitions as Spark's Kafka source does), the backlog growing behind them; each "
     "answers its tuple with an applied ack. CPU from each process's own clock "
     "(`/proc`), per 0.5 s of wall time (a cycle at the default cadence), of the busiest "
     "instance: near a whole core the instance is saturated, its cycles stretch and the "
     "figure stops growing; memory the largest resident-set growth of an instance from no "
     "query to full windows; the fleet's triggers on time say whether it published every "
     "second (below 100 % it was short of CPU itself); \"behind → tuple\" from the "
     "publication of a query's first batch behind to its first tuple's own stamp (an "
     "`executors` tuple where the task slots bound, as in every row here): the model's "
     "confirmation plus whatever the controller's own backlog adds; \"units given\" those "
     "of the knob tuple that follows it, against the units the load needs to keep up, busy "
     "all the time (draining the backlog too needs more). From its first tuple on a query "
     "keeps up at once, whatever it was given: what follows is not measured. The takeover "
     "kills one instance and times the first takeover record by which the others lead all "
     "its shards. "
     "No job runs; the fleet, the producer and the controllers share the 2 cores."),
    ("overhead", "The runtime's instrumentation overhead", overhead,
     "The same plan on the same preloaded readings in one SparkSession, alternating: bare "
     "(the plan into the transactional sink, nothing else) and under the runtime as `job "
     "run` runs it (gate, progress listener, metrics, heartbeats and liveness beats, "
     "Prometheus figures, control consumer, role thread, per-batch knobs); rows of the "
     "batches after the first over their span, from Spark's own progress of each query. "
     "Runs of one mode differ by up to a quarter (the JVM keeps warming up over the runs), "
     "so a ratio within a few per cent of 1 says no overhead was measurable."),
)


def commands() -> list[str]:
    """Each benchmark's command at the settings its table quotes (`python -m bench all`)."""
    titles = {name: title for name, title, *_ in SECTIONS}
    titles["sim"] = "The policy against three baselines, simulated ([simulation.md](simulation.md))"
    return ["## Commands", "", *_table(["benchmark", "command"], [
        [titles[b.name], f"`{' '.join(b.command())}`"]
        for b in BENCHMARKS])]


def render(results_dir: Path = RESULTS_DIR) -> str:
    """The commands, then every section whose result file exists, in order."""
    lines: list[str] = [*commands(), ""]
    for name, title, table, method in SECTIONS:
        path = results_dir / f"{name}.json"
        if not path.is_file():
            continue
        result = json.loads(path.read_text())
        lines += [f"## {title}", "", stamp(result), "", *table(result), "", method, ""]
    return "\n".join(lines).rstrip() + "\n"


def document(current: str, rendered: str) -> str:
    """`current` with the text between the markers replaced by `rendered`."""
    head, rest = current.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n\n{rendered}\n{END}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"update {DOC.name}")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when {DOC.name} is not what the results render to")
    parser.add_argument("--stale", action="store_true",
                        help="list the results older than the code they measure; exit 1 when "
                             "there are any")
    args = parser.parse_args(argv)
    if args.stale:
        found = freshness.stale()
        for s in found:
            print(f"stale: {s.name}: {s.why}")
        return 1 if found else 0
    rendered = render()
    expected = document(DOC.read_text(), rendered)
    if args.check:
        if DOC.read_text() != expected:
            print(f"{DOC} is out of date: run `python -m bench.report --write`")
            return 1
        return 0
    print(rendered)
    if args.write:
        DOC.write_text(expected)
        print(f"written to {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
