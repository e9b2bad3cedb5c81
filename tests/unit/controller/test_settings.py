"""Settings: validation messages, and reading them from options and env vars in one place."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

import pytest

from controller.cli import add_controller_commands, main, settings_from
from controller.settings import (
    ControllerSettings,
    KafkaSettings,
    ModelSettings,
    PolicySettings,
    SettingsError,
)
from streamctl.options import attribute_docs


@pytest.mark.parametrize(("make", "message"), [
    (lambda: PolicySettings(target_utilisation=1.5), "policy.target_utilisation must be a ratio"),
    (lambda: PolicySettings(low_water_utilisation=0.8),
     "need policy.low_water_utilisation < policy.target_utilisation"),
    (lambda: PolicySettings(min_parallelism=8, max_parallelism=4),
     "need 1 <= policy.min_parallelism (8) <= policy.max_parallelism (4)"),
    (lambda: PolicySettings(catch_up_s=0), "policy.catch_up_s must be a positive number"),
    (lambda: PolicySettings(reconfiguration_pause_s=-1),
     "policy.reconfiguration_pause_s must be a number >= 0, got -1"),
    (lambda: ModelSettings(min_samples=2), "model.min_samples must be at least 3"),
    (lambda: ModelSettings(arrival_window_s=90), "model.arrival_window_s must be in (0, "),
    (lambda: ModelSettings(max_samples=3, min_samples=4), "model.max_samples (3) must be >="),
    (lambda: KafkaSettings(metrics_offset_reset="middle"), "'window', 'latest' or 'earliest'"),
    (lambda: KafkaSettings(bootstrap_servers=" "), "kafka.bootstrap_servers must not be empty"),
    (lambda: ControllerSettings(metrics_port=70000), "metrics_port must be in [0, 65535]"),
    (lambda: ControllerSettings(ack_timeout_s=-1), "ack_timeout_s must be a positive number"),
    (lambda: ControllerSettings(cluster_collect_s=6),
     "cluster_collect_s must be in (0, cluster_status_interval_s], got 6"),
    (lambda: ModelSettings(overhead_fit_min_spread=1), "model.overhead_fit_min_spread must be > 1"),
    (lambda: PolicySettings(skew_partition_share=0.3),
     "policy.skew_partition_share must be in [0.5, 1]"),
    (lambda: PolicySettings(lost_after_intervals=0), "policy.lost_after_intervals must be >= 1"),
    (lambda: PolicySettings(ineffective_gain_ratio=0), "policy.ineffective_gain_ratio must be"),
])
def test_invalid_settings_say_what_and_why(make: Callable[[], object], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        make()


def test_every_field_is_documented() -> None:
    for cls in (ControllerSettings, ModelSettings, PolicySettings, KafkaSettings):
        docs = attribute_docs(cls)
        assert set(docs) == set(cls.__dataclass_fields__), cls.__name__


def test_every_job_option_is_documented() -> None:
    from streaming_jobs.config import GROUPS, JobConfig

    assert set(attribute_docs(JobConfig)) == set(JobConfig.__dataclass_fields__) - set(GROUPS)
    for cls in GROUPS.values():
        assert set(attribute_docs(cls)) == set(cls.__dataclass_fields__), cls.__name__


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="streamctl")
    add_controller_commands(parser.add_subparsers(dest="group", required=True))
    return parser.parse_args(argv)


def test_defaults_then_env_then_options() -> None:
    assert settings_from(parse(["controller", "run"]), {}) == ControllerSettings()
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "kafka:9092", "STREAMCTL_METRICS_TOPIC": "m",
           "STREAMCTL_CONTROLLER_METRICS_PORT": "9400", "STREAMCTL_CONTROLLER_DRY_RUN": "true",
           "STREAMCTL_CONTROLLER_CATCH_UP_S": "30"}
    s = settings_from(parse(["controller", "run", "--catch-up-s", "90", "--window-s", "20"]), env)
    assert (s.kafka.bootstrap_servers, s.kafka.metrics_topic, s.metrics_port) == (
        "kafka:9092", "m", 9400)
    assert s.dry_run and s.policy.catch_up_s == 90 and s.model.window_s == 20
    assert s.kafka.control_topic == "streamctl.control"


def test_the_control_key_is_read_from_the_environment_and_refused_as_an_option(
        capsys: pytest.CaptureFixture[str]) -> None:
    key = "k" * 32
    s = settings_from(parse(["controller", "run"]), {"STREAMCTL_CONTROL_KEY": key})
    assert s.kafka.control_key == key
    with pytest.raises(SystemExit):
        parse(["controller", "run", "--control-key", key])
    assert "unrecognized arguments: --control-key" in capsys.readouterr().err


def test_a_bad_env_value_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="STREAMCTL_CONTROLLER_METRICS_PORT='x'"):
        settings_from(parse(["controller", "run"]), {"STREAMCTL_CONTROLLER_METRICS_PORT": "x"})


def test_run_reports_invalid_settings_without_touching_kafka(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--target-utilisation", "2"]) == 2
    assert "policy.target_utilisation must be a ratio" in capsys.readouterr().err
