"""The `streamctl stack` command group: registration, documented options, defaults."""

from __future__ import annotations

import argparse
from pathlib import Path

from streamctl.stack.cli import add_stack_commands
from streamctl.stack.defaults import (
    DEFAULT_TOPICS,
    INPUT_TOPIC,
    LEASE_TOPIC,
    default_bootstrap_servers,
    default_state_dir,
)


def stack_parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="streamctl")
    add_stack_commands(root.add_subparsers(dest="command"))
    return root


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_stack_registers_every_command_with_documented_options() -> None:
    commands = subcommands(subcommands(stack_parser())["stack"])
    assert set(commands) == {"up", "down", "status", "resolve", "topics", "kafka", "secrets"}
    for name, parser in commands.items():
        for action in parser._actions:
            assert action.help, f"stack {name} {action.option_strings} has no help text"


def test_up_defaults_and_handler() -> None:
    args = stack_parser().parse_args(["stack", "up", "--port", "19092"])
    assert (args.port, args.controller_port, args.no_topics) == (19092, None, False)
    assert callable(args.handler)


def test_defaults_follow_the_environment(tmp_path: Path) -> None:
    env = {"STREAMCTL_STATE_DIR": str(tmp_path), "STREAMCTL_BOOTSTRAP_SERVERS": "h:1"}
    assert default_state_dir(env) == tmp_path.resolve()
    assert default_bootstrap_servers(env) == "h:1"
    assert default_bootstrap_servers({}) == "127.0.0.1:9092"
    assert default_state_dir({}).name == ".streamctl"


def test_default_topics_are_unique_input_has_two_partitions_and_the_lease_one() -> None:
    names = [spec.name for spec in DEFAULT_TOPICS]
    assert len(names) == len(set(names)) == 13
    assert next(s for s in DEFAULT_TOPICS if s.name == INPUT_TOPIC).partitions == 2
    assert next(s for s in DEFAULT_TOPICS if s.name == LEASE_TOPIC).partitions == 1


def test_topics_also_creates_the_topics_a_job_declares() -> None:
    from streamctl.stack.cli import job_topics

    specs = {s.name: s.partitions for s in job_topics(["click-sessions", "click-alerts"], 3)}
    assert specs == {"clicks-enriched": 3, "clicks-sessionized": 3, "click-alerts": 3,
                     "clicks-enriched.dlq": 1, "clicks-sessionized.dlq": 1}
    assert job_topics(["sensor-averages"], 2) == []  # all among the default topics
    args = stack_parser().parse_args(["stack", "topics", "--job", "a", "--job", "b"])
    assert args.job == ["a", "b"] and args.partitions == 2
