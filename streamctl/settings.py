"""Options shared by several `streamctl` subcommands, read from the environment by default."""

from __future__ import annotations

import argparse
import os

from streamctl.security import kafka
from streamctl.security.kafka import DEFAULT_BOOTSTRAP, KafkaSecurity


def bootstrap_from_env() -> str:
    return os.environ.get("STREAMCTL_BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP)


def kafka_security() -> KafkaSecurity:
    """The STREAMCTL_KAFKA_* setting of this command; a bad one stops it with the message."""
    from streamctl.errors import UserFacingError

    return kafka.from_env_raising(UserFacingError)


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers",
        default=bootstrap_from_env(),
        help="Kafka bootstrap servers (env STREAMCTL_BOOTSTRAP_SERVERS)",
    )
