"""Every `streamctl` command and option explains itself in `--help`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from streamctl.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, path: str = "streamctl"
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_command_and_option_has_help_text() -> None:
    missing = []
    commands = list(_parsers(build_parser()))
    for path, parser in commands:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{path} {c.dest}" for c in action._choices_actions if not c.help]
            elif action.option_strings and not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings)}")
    assert {p for p, _ in commands} >= {
        "streamctl stack up", "streamctl job run", "streamctl controller run",
        "streamctl produce", "streamctl demo"}
    assert missing == []
