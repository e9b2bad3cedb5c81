"""The `controller run` command, and the one place settings are read from args and env vars.

Owns the mapping from `ControllerSettings` fields to options and environment variables
(`streamctl.options`, the loader the job shares). Every field but a secret becomes `--<name>`
(help text = the field's docstring in `settings`), read in this order: the option, its
environment variable, the field's default. The root `streamctl` parser calls
`add_controller_commands`; `python -m controller run` uses `add_run_command` directly.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping

from controller.settings import (
    ControllerSettings,
    KafkaSettings,
    ModelSettings,
    PolicySettings,
    SeasonSettings,
    SettingsError,
)
from schemas import auth
from streamctl.options import Option, OptionError, add_options, options_of, read
from streamctl.security import TransportSecurity, TransportSecurityError

GROUPS: dict[str | None, type] = {
    None: ControllerSettings, "model": ModelSettings, "policy": PolicySettings,
    "kafka": KafkaSettings, "season": SeasonSettings,
}
"""Setting groups by attribute name on ControllerSettings (None: its own scalar fields)."""

ENV_NAMES = {
    "bootstrap_servers": "STREAMCTL_BOOTSTRAP_SERVERS",
    "metrics_topic": "STREAMCTL_METRICS_TOPIC",
    "control_topic": "STREAMCTL_CONTROL_TOPIC",
    "ack_topic": "STREAMCTL_ACK_TOPIC",
    "decisions_topic": "STREAMCTL_DECISIONS_TOPIC",
    "metrics_port": "STREAMCTL_CONTROLLER_METRICS_PORT",
    "control_key": "STREAMCTL_CONTROL_KEY",
}
"""The names shared with the rest of the stack; others are STREAMCTL_CONTROLLER_<FIELD>."""


def env_name(field_name: str) -> str:
    return ENV_NAMES.get(field_name, f"STREAMCTL_CONTROLLER_{field_name.upper()}")


def options(group: str | None) -> list[Option]:
    """The options of one settings group: `--<field>` and its variable, help from the field's
    docstring in `settings`."""
    return options_of(GROUPS[group], env_name, dest_prefix=f"{group or 'top'}__")


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    for group in GROUPS:
        add_options(parser.add_argument_group(f"{group or 'controller'} settings"),
                    options(group))


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ControllerSettings:
    """The settings of this process: option, else environment variable, else default."""
    try:
        values = {group: read(options(group), vars(args), environ) for group in GROUPS}
    except OptionError as exc:
        raise SettingsError(str(exc)) from None
    if "control_key" not in values["kafka"] and environ.get(auth.KEY_FILE_ENV):
        values["kafka"]["control_key"] = _key_from_file(environ)
    transport = _transport_security(environ)
    values["kafka"]["security"] = transport.kafka
    values[None]["metrics_endpoint"] = transport.metrics_endpoint
    return ControllerSettings(
        model=ModelSettings(**values["model"]), policy=PolicySettings(**values["policy"]),
        kafka=KafkaSettings(**values["kafka"]), season=SeasonSettings(**values["season"]),
        **values[None],
    )


def _transport_security(environ: Mapping[str, str]) -> TransportSecurity:
    try:
        return TransportSecurity.from_env(environ)
    except TransportSecurityError as exc:
        raise SettingsError(str(exc)) from None


def _key_from_file(environ: Mapping[str, str]) -> str:
    try:
        key = auth.key_from_env({auth.KEY_FILE_ENV: environ[auth.KEY_FILE_ENV]})
        return key.decode() if key else ""
    except (auth.ControlKeyError, UnicodeDecodeError) as exc:
        raise SettingsError(f"control key: {exc}") from exc


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
    """Register `controller run`, `record` and `replay` on the root `streamctl` parser."""
    group = subparsers.add_parser(
        "controller", help="the elastic controller (metrics in, control tuples out)",
        description="The controller process of streamctl.")
    commands = group.add_subparsers(dest="controller_command", required=True,
                                    metavar="COMMAND")
    add_run_command(commands)
    add_record_command(commands)
    add_replay_command(commands)


def run_command(args: argparse.Namespace) -> int:
    logging.basicConfig(stream=sys.stdout, level=args.log_level,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        settings = settings_from(args, os.environ)
    except SettingsError as exc:
        print(f"controller: invalid settings: {exc}", file=sys.stderr)
        return 2
    # Imported here so that `--help` and settings errors need no Kafka client library.
    from controller.app import collect_garbage_rarely, run
    from controller.kafka.clients import KafkaSetupError

    collect_garbage_rarely()
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


# -- record and replay (offline analysis; see controller.replay.driver) -----------------------


def _time_ms(text: str) -> int:
    """An ISO 8601 time (UTC unless it carries an offset) as epoch milliseconds."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _add_range_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_ms", type=_time_ms, default=None, metavar="TIME",
                        help="first record time, ISO 8601 (UTC unless an offset is given), "
                             "e.g. 2026-11-22T01:30:00Z")
    parser.add_argument("--to", dest="to_ms", type=_time_ms, default=None, metavar="TIME",
                        help="last record time, ISO 8601; may be in the future (waits for it)")


def _range_given(args: argparse.Namespace, command: str) -> bool:
    """Both ends of a time range, in order (an inverted range is reported, not run)."""
    if args.from_ms is None or args.to_ms is None:
        return False
    if args.from_ms > args.to_ms:
        print(f"{command}: --from is after --to", file=sys.stderr)
        return False
    return True


def add_record_command(commands: argparse._SubParsersAction) -> None:
    record = commands.add_parser(
        "record", help="copy the metrics topic to a JSON-lines trace file",
        description="Copy TaskMetrics records of the metrics topic to a JSON-lines file (one "
                    "record with its Kafka timestamp per line): for a duration from now, "
                    "between two times, or from now until Ctrl-C. Undecodable records are "
                    "counted and listed with topic, partition and offset, never fatal. "
                    "`controller replay --trace` reads the file.")
    record.add_argument("--output", "-o", required=True, help="trace file to write (.jsonl)")
    record.add_argument("--duration-s", type=float, default=None,
                        help="record this many seconds from now (instead of --from/--to)")
    _add_range_options(record)
    for option in options("kafka"):
        if option.field in ("bootstrap_servers", "metrics_topic"):
            record.add_argument(option.flag, dest=option.field,
                                default=os.environ.get(option.env, option.default),
                                help=f"{option.help} [env {option.env}]")
    record.set_defaults(handler=record_command)


_UNTIL_INTERRUPTED_MS = 2**53
"""`--to` of a recording with no range given: far enough that only Ctrl-C ends it."""


def record_command(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from controller.kafka.clients import KafkaSetupError
    from controller.kafka.traces import read_metrics
    from controller.replay.trace import TraceWriter

    try:
        security = _transport_security(os.environ).kafka
    except SettingsError as exc:
        print(f"controller record: {exc}", file=sys.stderr)
        return 2
    now_ms = time.time_ns() // 1_000_000
    if args.duration_s is not None:
        from_ms, to_ms = now_ms, now_ms + int(args.duration_s * 1000)
    elif _range_given(args, "controller record"):
        from_ms, to_ms = args.from_ms, args.to_ms
    elif args.from_ms is None and args.to_ms is None:
        from_ms, to_ms = now_ms, _UNTIL_INTERRUPTED_MS
        print("recording until Ctrl-C", file=sys.stderr)
    else:
        print("controller record: give --duration-s, or --from and --to", file=sys.stderr)
        return 2
    try:
        with Path(args.output).open("w") as out:
            writer = TraceWriter(out, topic=args.metrics_topic, from_ms=from_ms)
            try:
                for entry in read_metrics(args.bootstrap_servers, args.metrics_topic,
                                          from_ms, to_ms, writer.bad, security=security):
                    writer.write(entry)
            except KeyboardInterrupt:
                to_ms = min(to_ms, time.time_ns() // 1_000_000)
            writer.close(to_ms)
    except KafkaSetupError as exc:
        print(f"controller record: {exc}", file=sys.stderr)
        return 1
    print(f"recorded {writer.records} metrics records to {args.output}, "
          f"{len(writer.bad_records)} bad")
    for bad in writer.bad_records:
        print(f"  bad record at {bad.where}: {bad.reason}")
    return 0


def add_replay_command(commands: argparse._SubParsersAction) -> None:
    replay = commands.add_parser(
        "replay", help="what the controller would have decided on recorded metrics",
        description="Run the controller's real loop and policy over recorded metrics, on a "
                    "clock that follows the recorded times, and print each decision (seconds "
                    "from the trace start, action, parameter current → target, reason) and a "
                    "summary. Sent control tuples count as APPLIED after --ack-delay-s; the "
                    "recorded job never changed, so events after a query's first actuation "
                    "(marked *) are what the policy would do if that change had no effect.")
    source = replay.add_argument_group("what to replay (a file, or the topic between two times)")
    source.add_argument("--trace", default=None,
                        help="trace file written by `controller record`")
    _add_range_options(source)
    how = replay.add_argument_group("replay")
    how.add_argument("--ack-delay-s", type=float, default=5.0,
                     help="trace seconds until a sent control tuple counts as applied "
                          "(default 5)")
    how.add_argument("--tail-s", type=float, default=0.0,
                     help="keep the clock running this long after the trace ends (default 0)")
    how.add_argument("--json", action="store_true",
                     help="print the events and summary as one JSON document")
    add_settings_options(replay)
    replay.set_defaults(handler=replay_command)


def replay_command(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from controller.replay.driver import ReplayOptions, render_text, replay
    from controller.replay.trace import Trace, read_trace

    try:
        settings = settings_from(args, os.environ)
    except SettingsError as exc:
        print(f"controller replay: invalid settings: {exc}", file=sys.stderr)
        return 2
    if args.trace is not None:
        trace, source = read_trace(Path(args.trace)), args.trace
    elif _range_given(args, "controller replay"):
        from controller.kafka.clients import KafkaSetupError
        from controller.kafka.traces import read_metrics
        from controller.replay.trace import BadRecord

        bad: list[BadRecord] = []
        kafka = settings.kafka
        try:
            entries = tuple(read_metrics(kafka.bootstrap_servers, kafka.metrics_topic,
                                         args.from_ms, args.to_ms, bad.append,
                                         security=kafka.security))
        except KafkaSetupError as exc:
            print(f"controller replay: {exc}", file=sys.stderr)
            return 1
        trace = Trace(entries, topic=kafka.metrics_topic, from_ms=args.from_ms,
                      to_ms=args.to_ms, bad_records=tuple(bad))
        source = f"{kafka.metrics_topic} from {args.from_ms} to {args.to_ms}"
    else:
        print("controller replay: give --trace FILE, or --from and --to", file=sys.stderr)
        return 2
    result = replay(trace, settings, ReplayOptions(args.ack_delay_s, args.tail_s))
    if args.json:
        print(json.dumps({"source": source, **result.to_json()}, indent=1))
    else:
        render_text(result, source)
    return 0
