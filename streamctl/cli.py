"""Root argument parser of `streamctl`; each subcommand group registers itself."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from streamctl.errors import UserFacingError


def _fill_spark_jars_from_stack() -> None:
    """The job reads its Spark Kafka connector jars from STREAMCTL_SPARK_JARS. An image sets
    STREAMCTL_SPARK_JARS_DIR (jars resolved at build time); locally we resolve them with
    Maven (cached in ~/.m2). A value the caller set wins."""
    if os.environ.get("STREAMCTL_SPARK_JARS"):
        return
    jars_dir = os.environ.get("STREAMCTL_SPARK_JARS_DIR")
    if jars_dir:
        jars = sorted(Path(jars_dir).glob("*.jar"))
    else:
        from streamctl.stack.connector import spark_kafka_jars

        jars = spark_kafka_jars()
    os.environ["STREAMCTL_SPARK_JARS"] = ",".join(str(p) for p in jars)


def _fill_control_key_from_stack(args: argparse.Namespace) -> None:
    """Jobs refuse to start without the controller's key. A key the caller set
    (STREAMCTL_CONTROL_KEY, or STREAMCTL_CONTROL_KEY_FILE, e.g. a Docker secret) wins. Locally,
    `stack up` and `demo` generate one under the state dir (`control.key`, mode 0600), and the
    job and controller started on this machine read it from there. `job run` and `controller
    run` never generate one: a deployment that forgot its key fails closed."""
    from schemas import auth

    if os.environ.get(auth.KEY_ENV) or os.environ.get(auth.KEY_FILE_ENV):
        return
    from streamctl.stack.defaults import default_state_dir

    path = (getattr(args, "state_dir", None) or default_state_dir()) / "control.key"
    if args.group == "demo" or getattr(args, "stack_command", None) == "up":
        auth.ensure_key_file(path)
    if path.is_file():
        os.environ[auth.KEY_FILE_ENV] = str(path)


def build_parser() -> argparse.ArgumentParser:
    from controller.cli import add_controller_commands
    from streamctl.demo import add_demo_command
    from streamctl.loadgen import add_produce_command
    from streamctl.schema_cli import add_schema_commands
    from streamctl.stack.cli import add_stack_commands
    from streamctl.watch import add_watch_commands
    from streaming_jobs.cli import add_job_commands

    parser = argparse.ArgumentParser(
        prog="streamctl",
        description=(
            "An elastic control loop for PySpark Structured Streaming jobs on Kafka: jobs "
            "publish per-batch metrics, a controller sizes them and sends control tuples the "
            "jobs apply at runtime."
        ),
    )
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    add_stack_commands(groups)
    add_job_commands(groups)
    add_controller_commands(groups)
    add_produce_command(groups)
    add_demo_command(groups)
    add_watch_commands(groups)
    add_schema_commands(groups)
    return parser


def prepare(args: argparse.Namespace) -> None:
    """The environment a command's processes need from the local stack (the connector's jars,
    the control key), as `main` sets it before running the command."""
    if args.group == "job" and getattr(args, "job_command", None) in ("run", "check"):
        _fill_spark_jars_from_stack()
    if args.group in ("job", "controller", "demo", "stack"):
        _fill_control_key_from_stack(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prepare(args)
    handler = getattr(args, "handler", None)
    if handler is None:
        build_parser().parse_args([args.group, "--help"])
        return 2
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except UserFacingError as exc:
        print(f"streamctl: {exc}", file=sys.stderr)
        return 1
