"""Kafka's own command-line tools, run from the jars resolved beside the broker.

Owns the tool names (`console-consumer`, `topics`, …: what Kafka's `bin/kafka-*.sh` scripts
run) and the command line for one: the broker's Java, the `kafka-tools` artifact and the
broker's core jar (`configs`' main class lives there) at the broker's version
(`maven/kafka-tools.xml`, a classpath of its own), quiet logging,
`--bootstrap-server` when the caller gave none, and `--command-config` with the client's
security properties on a secured broker.
Neighbours: `cli` (`streamctl stack kafka TOOL …`), `broker_files.java_command`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from streamctl.security.kafka import KafkaSecurity
from streamctl.stack.broker_files import java_command
from streamctl.stack.errors import StackError

TOOLS: Mapping[str, str] = {
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "topics": "org.apache.kafka.tools.TopicCommand",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "transactions": "org.apache.kafka.tools.TransactionsCommand",
    "configs": "kafka.admin.ConfigCommand",  # in kafka_2.13, the broker's core jar
    "delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
}
"""streamctl's name for a tool (Kafka's script without `kafka-` and `.sh`) → its main class."""


class UnknownToolError(StackError):
    """A tool name that is not one of `TOOLS`."""


def tool_command(tool: str, args: Sequence[str], *, java: Path, classpath: Sequence[Path],
                 log4j: Path, bootstrap_servers: str,
                 command_config: Path | None = None) -> list[str]:
    """The java command line running `tool` with `args` (pure)."""
    main = TOOLS.get(tool)
    if main is None:
        raise UnknownToolError(f"no Kafka tool {tool!r}; the tools are: {', '.join(TOOLS)}")
    given = list(args)
    if "--bootstrap-server" not in given and "--help" not in given:
        given = ["--bootstrap-server", bootstrap_servers, *given]
    if command_config is not None and "--command-config" not in given:
        given += ["--command-config", str(command_config)]
    return java_command(java, classpath, log4j, "256m", main, *given)


def client_properties(security: KafkaSecurity) -> str | None:
    """A Java client's properties file for `streamctl.security`, or None on PLAINTEXT (none
    needed)."""
    properties = security.java_properties()
    if properties == {"security.protocol": "PLAINTEXT"}:
        return None
    return "".join(f"{key}={_escaped(value)}\n" for key, value in properties.items())


def _escaped(value: str) -> str:
    """A value as a .properties file reads it back (backslashes are escapes there)."""
    return value.replace("\\", "\\\\")
