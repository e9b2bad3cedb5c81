"""`job run`, `job check`, `job list`: the command line of jobs (registered into `streamctl`).

Owns the options (one per `JobConfig` field but the environment-only secrets, defaults from
STREAMCTL_* env vars; the job's own settings with `--set name=value`), loading the job
(`loading`), logging set-up and signal handling. `python -m streaming_jobs run …` uses the same
options. `job state` and `job send` live in `state_cli` and `send_cli`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any

from streaming_jobs.config import DERIVED, ENV_ONLY, ConfigError, JobConfig, env_var

if TYPE_CHECKING:
    from streaming_jobs.api import Job

_HELP = {
    "bootstrap_servers": "Kafka bootstrap servers (required)",
    "job": "the job: an installed job's name (`streamctl job list`) or an import path "
           "package.module:attribute",
    "query_id": "stable query name control tuples address (default: the job's name)",
    "instance_id": "this instance's id (default hostname-pid)",
    "input_topic": "the job's input topic (default: the job's)",
    "output_topic": "the job's output topic (default: the job's)",
    "dlq_topic": "dead-letter topic for undecodable input records (default: the job's)",
    "metrics_topic": "topic for per-batch TaskMetrics",
    "control_topic": "topic of control tuples",
    "ack_topic": "topic for acks to control tuples",
    "state_dir": "where checkpoints live (default: the checkout's .streamctl, else "
                 "~/.local/state/streamctl)",
    "checkpoint_dir": "Spark checkpoint location (default <state-dir>/checkpoints/<job>/"
                      "<query_id>)",
    "input_parallelism": "initial Kafka source minPartitions",
    "max_offsets_per_trigger": "maximum records per micro-batch",
    "trigger_interval_s": "micro-batch trigger interval in seconds",
    "state_partitions": "shuffle/state partitions of the stateful operator",
    "task_slots": "Spark local[N] task slots in local mode; upper bound of input_parallelism "
                  "there",
    "metrics_port": "Prometheus port (0 = off)",
    "spark_jars": "comma-separated jars for spark.jars (the Spark Kafka connector)",
    "max_runtime_s": "stop cleanly after this many seconds (0 = run until SIGTERM/Ctrl-C)",
    "state_topic": "compacted topic for the job's desired state (keyed by query id)",
    "max_offsets_per_trigger_limit": "highest batch cap a control tuple may set",
    "max_state_partitions": "highest state partitions a control tuple may set",
    "max_executors": "highest executor count a control tuple may request",
    "shed_fraction": "initial fraction of low-priority records shed",
    "max_shed_fraction": "highest shed fraction a control tuple may set (< 1)",
    "input_drain_quiet_s": "an input switch waits until the old topic's end offsets have "
                           "not moved for this long",
    "input_drain_timeout_s": "longest wait for the old topic to drain before an input "
                             "switch is refused",
    "udf_version": "initial version of the job's swappable function (default: the job's)",
    "spark_master": "Spark master: empty for local[task_slots] in this process, or "
                    "spark://host:port[,host:port] for a Spark standalone cluster",
    "spark_driver_host": "address executors reach this driver at (spark.driver.host; on a "
                         "cluster)",
    "executor_cores": "cores per executor (spark.executor.cores; on a cluster)",
    "executor_memory_mb": "heap per executor in MiB (spark.executor.memory; on a cluster)",
    "executors": "executors to request at start (on a cluster; 0 = what it grants)",
    "role": "active (runs the query) or standby (warm SparkSession, no query, waits to be "
            "promoted; share the active's checkpoint dir); after a failover the instance "
            "named beside the checkpoint is active",
    "heartbeat_interval_s": "seconds between heartbeats of an instance running no batch "
                            "(standby, or idle active)",
}
_KEY_HELP = ("The control key is read from STREAMCTL_CONTROL_KEY or the file named by "
             "STREAMCTL_CONTROL_KEY_FILE, never from an option; the job refuses to start "
             "without one. Applied control tuples are persisted beside the checkpoint "
             "(<checkpoint-dir>.desired-state.json) and win over these options on a restart.")
_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str}


def add_run_command(subparsers: Any, name: str = "run") -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        name, help="run a job with its elastic runtime",
        description="Run a job (an installed one by name, or yours by import path); it applies "
                    "control tuples at batch boundaries and publishes per-batch metrics. "
                    + _KEY_HELP)
    _add_config_options(parser)
    parser.set_defaults(handler=run_command)
    return parser


def _add_config_options(parser: argparse.ArgumentParser) -> None:
    for f in fields(JobConfig):
        if f.name in ENV_ONLY or f.name in DERIVED:
            continue
        default = "" if f.default is MISSING or f.default == "" else f" (default {f.default})"
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", dest=f.name, type=_TYPES[str(f.type)],
            default=None, help=f"{_HELP[f.name]}; env {env_var(f.name)}{default}")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="NAME=VALUE",
                        help="one of the job's own settings (`streamctl job list` shows them); "
                             "repeatable; env STREAMCTL_<NAME>")


def add_job_commands(subparsers: Any) -> None:
    """Register `job run|check|list|state|send` on the root CLI's subparsers."""
    job = subparsers.add_parser("job", help="run jobs, check and list them, read their "
                                            "desired state, send them a control tuple")
    commands = job.add_subparsers(dest="job_command", required=True, metavar="COMMAND")
    add_run_command(commands)
    check = commands.add_parser(
        "check", help="load a job and check its plan without running it",
        description="Load the job, build its plan in a local SparkSession and check the "
                    "builder's columns against its output format, as `job run` does before "
                    "Spark runs a batch; nothing is read or written.")
    check.add_argument("--job", default=None, help=_HELP["job"] + "; env STREAMCTL_JOB")
    check.add_argument("--set", dest="settings", action="append", default=[],
                       metavar="NAME=VALUE", help="one of the job's own settings")
    check.set_defaults(handler=check_command)
    listing = commands.add_parser("list", help="the installed jobs, with their formats, knob "
                                               "and settings")
    listing.set_defaults(handler=list_command)
    from streaming_jobs.send_cli import add_send_command
    from streaming_jobs.state_cli import add_state_command

    add_state_command(commands)
    add_send_command(commands)


def _load(args: argparse.Namespace) -> Job:
    from streaming_jobs.loading import JOB_ENV, load

    return load(args.job or os.environ.get(JOB_ENV, ""))


def run_command(args: argparse.Namespace) -> int:
    from streaming_jobs.loading import JobLoadError  # the API imports pyspark's types

    _configure_logging()
    try:
        job = _load(args)
        options = {f.name: getattr(args, f.name, None) for f in fields(JobConfig)
                   if f.name not in ENV_ONLY}
        config = JobConfig.from_sources(job, options)
    except (ConfigError, JobLoadError) as exc:
        print(f"job run: {exc}", file=sys.stderr)
        return 2
    from streaming_jobs.runtime.job import ElasticJob  # imports pyspark: only when running

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        elastic = ElasticJob(job, config)
    except ConfigError as exc:  # a start-up value refused, another query's checkpoint
        print(f"job run: {exc}", file=sys.stderr)
        return 2
    try:
        elastic.start()
    except ConfigError as exc:  # the job's builder failed or does not fit its output
        print(f"job run: {exc}", file=sys.stderr)
        elastic.stop()
        return 2
    try:
        return elastic.run(stop, config.max_runtime_s)
    finally:
        elastic.stop()


def check_command(args: argparse.Namespace) -> int:
    """Load the job and build its plan in a local session (no broker is contacted)."""
    from streaming_jobs.loading import JobLoadError

    _configure_logging()
    try:
        job = _load(args)
        config = JobConfig.from_sources(job, {"bootstrap_servers": "unused:9092",
                                              "settings": args.settings},
                                        {**os.environ, "STREAMCTL_CONTROL_KEY": "x" * 32})
    except (ConfigError, JobLoadError) as exc:
        print(f"job check: {exc}", file=sys.stderr)
        return 2
    from streaming_jobs.runtime.query.plan import check_plan

    try:
        print(check_plan(job, config))
    except ConfigError as exc:
        print(f"job check: {exc}", file=sys.stderr)
        return 2
    return 0


def list_command(_args: argparse.Namespace) -> int:
    from streaming_jobs.loading import JobLoadError, installed, load

    try:
        entries = installed()
    except JobLoadError as exc:
        print(f"job list: {exc}", file=sys.stderr)
        return 2
    for name, entry in sorted(entries.items()):
        try:
            print(describe(load(name), f"{entry.target} ({entry.distribution})"))
        except JobLoadError as exc:
            print(f"{name}  ({entry.target}): cannot be loaded: {exc}")
        print()
    return 0


def describe(job: Job, where: str) -> str:
    """A job as `job list` shows it."""
    lines = [f"{job.name}  {where}"]
    if job.description:
        lines.append(f"  {job.description}")
    lines += [f"  input   {job.topics.input}: {job.input.describe()}",
              f"  output  {job.topics.output}: {job.output.describe()} "
              f"({job.output_mode}), dead letters {job.topics.resolved_dead_letters()}",
              f"  scales with {job.scales_with}; "
              + ("stateful" if job.stateful else "stateless")
              + (f"; function versions {', '.join(job.functions)}" if job.functions else "")
              + ("; sheddable" if job.low_priority is not None else "")]
    lines += [f"  --set {s.name}=…  {s.help} (default {s.default!r})" for s in job.settings]
    return "\n".join(lines)


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # py4j logs every callback-server connection at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming_jobs")
    add_run_command(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.handler(args))
