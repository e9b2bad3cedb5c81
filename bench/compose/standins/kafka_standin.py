"""The Kafka broker stand-in of the container check: Apache Kafka from Maven Central in the
project's image, configured the way the official `apache/kafka` image configures itself.

The official image turns every `KAFKA_*` environment variable into a `server.properties` line
(`KAFKA_LISTENER_SECURITY_PROTOCOL_MAP` → `listener.security.protocol.map`; `__` for `_` and
`___` for `-`), formats its log directory with `CLUSTER_ID` unless that was done before, and
runs `kafka.Kafka` in the foreground. This does the same with the broker jars `streamctl stack
resolve` put in the image, so the compose file's own environment, listeners, volume and
healthcheck (`/opt/kafka/bin/kafka-topics.sh`, a wrapper installed beside this) are used as
written. Only the broker's code path to that point differs from the official image's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from streamctl.stack.broker_files import java_command
from streamctl.stack.jvm import require_java
from streamctl.stack.maven import BROKER_POM, resolve_classpath

TEMPLATES = Path(__file__).resolve().parent
CONFIG_DIR = Path("/opt/kafka/config")
_NOT_BROKER_SETTINGS = {"KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_LOG4J_OPTS"}


def property_name(variable: str) -> str:
    """`KAFKA_LOG_DIRS` → `log.dirs`, with the official image's escapes for `_` and `-`."""
    name = variable.removeprefix("KAFKA_").lower()
    return re.sub("_+", lambda m: {1: ".", 2: "_", 3: "-"}[len(m.group())], name)


def server_properties(env: Mapping[str, str]) -> str:
    return "".join(f"{property_name(k)}={v}\n" for k, v in sorted(env.items())
                   if k.startswith("KAFKA_") and k not in _NOT_BROKER_SETTINGS)


def main() -> int:
    env = os.environ
    cluster_id = env.get("CLUSTER_ID")
    if not cluster_id:
        print("kafka stand-in: CLUSTER_ID is not set", file=sys.stderr)
        return 2
    CONFIG_DIR.mkdir(parents=True, exist_ok=True)
    config = CONFIG_DIR / "server.properties"
    config.write_text(server_properties(env))
    log4j = TEMPLATES / "log4j2.xml"
    java = require_java()
    classpath = resolve_classpath(BROKER_POM, Path(env["STREAMCTL_STATE_DIR"]) / "maven")
    storage = java_command(java, classpath, log4j, "256m", "kafka.tools.StorageTool", "format",
                           "-t", cluster_id, "-c", str(config), "--ignore-formatted")
    if subprocess.run(storage, check=False).returncode != 0:
        print("kafka stand-in: formatting the log directory failed", file=sys.stderr)
        return 1
    # exec: the broker is the container's main process and gets `docker stop`'s SIGTERM.
    broker = java_command(java, classpath, log4j, "512m", "kafka.Kafka", str(config))
    os.execv(broker[0], broker)


if __name__ == "__main__":
    sys.exit(main())
