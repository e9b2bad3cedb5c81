"""`job send`'s arguments: the knobs set together with the tuple's own."""

from __future__ import annotations

import argparse

import pytest

from schemas.records import KnobSetting
from streaming_jobs.send_cli import add_send_command, send_command

BASE = ["send", "--query-id", "q", "--parameter", "input_parallelism", "--value", "8"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="job")
    add_send_command(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_each_together_is_a_setting_in_the_order_given() -> None:
    args = parse([*BASE, "--together", "max_offsets_per_trigger=6000",
                  "--together", "shed_fraction=0.1"])
    assert args.together == [KnobSetting("max_offsets_per_trigger", "6000"),
                             KnobSetting("shed_fraction", "0.1")]
    assert parse(BASE).together == []


@pytest.mark.parametrize("text", ["max_offsets_per_trigger", "=6000"])
def test_a_together_lacking_its_parameter_or_its_equals_sign_is_refused_by_name(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse([*BASE, "--together", text])
    assert f"{text!r} is not PARAMETER=VALUE" in capsys.readouterr().err


def test_a_knob_set_twice_is_refused_before_anything_is_sent(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = parse([*BASE, "--together", "input_parallelism=4"])
    assert send_command(args) == 2
    assert "input_parallelism set twice" in capsys.readouterr().err
