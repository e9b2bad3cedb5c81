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
from typing import TYPE_CHECKING, Any

from streamctl.options import add_options
from streaming_jobs.config import JobConfig, option_list
from streaming_jobs.errors import UserError

if TYPE_CHECKING:
    from streaming_jobs.api import Job

_KEY_HELP = ("The control key is read from STREAMCTL_CONTROL_KEY or the file named by "
             "STREAMCTL_CONTROL_KEY_FILE, never from an option; the job refuses to start "
             "without one. Applied control tuples are persisted beside the checkpoint "
             "(<checkpoint-dir>.desired-state.json) and win over these options on a restart.")


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
    add_options(parser, option_list())
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
    check.add_argument("--job", default=None, help="the job: an installed job's name or "
                       "package.module:attribute; env STREAMCTL_JOB")
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
    _configure_logging()
    try:
        job = _load(args)
        options = {o.field: getattr(args, o.key, None) for o in option_list()}
        options["settings"] = getattr(args, "settings", None)
        config = JobConfig.from_sources(job, options)
    except UserError as exc:
        print(f"job run: {exc}", file=sys.stderr)
        return 2
    from streaming_jobs.runtime.job import ElasticJob  # imports pyspark: only when running

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        elastic = ElasticJob(job, config)
    except UserError as exc:  # a start-up value refused, another query's checkpoint
        print(f"job run: {exc}", file=sys.stderr)
        return 2
    try:
        elastic.start()
    except UserError as exc:  # the job's builder failed or does not fit its output
        print(f"job run: {exc}", file=sys.stderr)
        elastic.stop()
        return 2
    code = 1  # unless the run ends as asked (a signal, its max runtime)
    try:
        code = elastic.run(stop, config.timing.max_runtime_s)
        return code
    finally:
        elastic.stop(on_purpose=code == 0)


def check_command(args: argparse.Namespace) -> int:
    """Load the job and build its plan in a local session (no broker is contacted)."""
    _configure_logging()
    try:
        job = _load(args)
        config = JobConfig.from_sources(job, {"bootstrap_servers": "unused:9092",
                                              "settings": args.settings},
                                        {**os.environ, "STREAMCTL_CONTROL_KEY": "x" * 32})
    except UserError as exc:
        print(f"job check: {exc}", file=sys.stderr)
        return 2
    from streaming_jobs.runtime.query.plan import check_plan

    try:
        print(check_plan(job, config))
    except UserError as exc:
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
