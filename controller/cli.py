"""The `controller run` command, and the one place settings are read from args and env vars.

Owns the mapping from `ControllerSettings` fields to options and environment variables. Every
field becomes `--<name>` (help text = the field's docstring in `settings`), read in this order:
the option, its environment variable, the field's default. The root `streamctl` parser calls
`add_controller_commands`; `python -m controller run` uses `add_run_command` directly.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from controller import settings as settings_module
from controller.settings import (
    ControllerSettings,
    KafkaSettings,
    ModelSettings,
    PolicySettings,
    SettingsError,
)

GROUPS: dict[str | None, type] = {
    None: ControllerSettings, "model": ModelSettings, "policy": PolicySettings,
    "kafka": KafkaSettings,
}
"""Setting groups by attribute name on ControllerSettings (None: its own scalar fields)."""

ENV_NAMES = {
    "bootstrap_servers": "STREAMCTL_BOOTSTRAP_SERVERS",
    "metrics_topic": "STREAMCTL_METRICS_TOPIC",
    "control_topic": "STREAMCTL_CONTROL_TOPIC",
    "ack_topic": "STREAMCTL_ACK_TOPIC",
    "decisions_topic": "STREAMCTL_DECISIONS_TOPIC",
    "metrics_port": "STREAMCTL_CONTROLLER_METRICS_PORT",
}
"""The names shared with the rest of the stack; others are STREAMCTL_CONTROLLER_<FIELD>."""


def env_name(field_name: str) -> str:
    return ENV_NAMES.get(field_name, f"STREAMCTL_CONTROLLER_{field_name.upper()}")


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string right after each field), one line."""
    tree = ast.parse(inspect.getsource(settings_module))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    docs = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def _scalar_fields(cls: type) -> list[tuple[str, Any]]:
    return [(f.name, f.default) for f in fields(cls) if f.default is not MISSING]


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    for group, cls in GROUPS.items():
        options = parser.add_argument_group(f"{group or 'controller'} settings")
        docs = field_docs(cls)
        for name, default in _scalar_fields(cls):
            help_text = (f"{docs.get(name, '')} [env {env_name(name)}; default {default}]"
                         .replace("%", "%%"))
            flag, dest = f"--{name.replace('_', '-')}", f"{group or 'top'}__{name}"
            if isinstance(default, bool):
                options.add_argument(flag, dest=dest, action="store_true", default=None,
                                     help=help_text)
            else:
                options.add_argument(flag, dest=dest, type=type(default), default=None,
                                     metavar=name.upper(), help=help_text)


def _parse_env(name: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.strip().lower() not in ("1", "true", "yes", "0", "false", "no", ""):
                raise ValueError("expected true/false")
            return raw.strip().lower() in ("1", "true", "yes")
        return type(default)(raw)
    except ValueError as exc:
        raise SettingsError(f"environment variable {name}={raw!r} is not a valid "
                            f"{type(default).__name__}: {exc}") from exc


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ControllerSettings:
    """The settings of this process: option, else environment variable, else default."""
    values: dict[str | None, dict[str, Any]] = {}
    for group, cls in GROUPS.items():
        chosen = {}
        for name, default in _scalar_fields(cls):
            given = getattr(args, f"{group or 'top'}__{name}", None)
            if given is None and env_name(name) in environ:
                given = _parse_env(env_name(name), environ[env_name(name)], default)
            if given is not None:
                chosen[name] = given
        values[group] = chosen
    return ControllerSettings(
        model=ModelSettings(**values["model"]), policy=PolicySettings(**values["policy"]),
        kafka=KafkaSettings(**values["kafka"]), **values[None],
    )


def add_run_command(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="run the controller until SIGTERM / Ctrl-C",
        description="Consume per-batch metrics, size every query with the rate model, send "
                    "control tuples and wait for their acks. Prints one line per decision and "
                    "a status line per query every few seconds.")
    add_settings_options(run)
    bounds = run.add_argument_group("run bounds")
    bounds.add_argument("--max-cycles", type=int, default=None,
                        help="stop after this many cycles (default: run until stopped)")
    bounds.add_argument("--timeout-s", type=float, default=None,
                        help="stop after this many seconds (default: run until stopped)")
    bounds.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    run.set_defaults(handler=run_command)


def add_controller_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `controller run` on the root `streamctl` parser."""
    group = subparsers.add_parser(
        "controller", help="the elastic controller (metrics in, control tuples out)",
        description="The controller process of streamctl.")
    add_run_command(group.add_subparsers(dest="controller_command", required=True,
                                         metavar="COMMAND"))


def run_command(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stdout, level=args.log_level,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        settings = settings_from(args, os.environ)
    except SettingsError as exc:
        print(f"controller: invalid settings: {exc}", file=sys.stderr)
        return 2
    # Imported here so that `--help` and settings errors need no Kafka client library.
    from controller.app import run
    from controller.kafka_io import KafkaSetupError

    try:
        run(settings, max_cycles=args.max_cycles, timeout_s=args.timeout_s)
    except KafkaSetupError as exc:
        print(f"controller: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controller",
                                     description="The streamctl controller.")
    add_run_command(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.handler(args))
