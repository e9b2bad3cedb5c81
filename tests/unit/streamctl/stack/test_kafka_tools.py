"""`streamctl.stack.kafka_tools`: the command line of one of Kafka's tools, and its client
properties."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamctl.security.kafka import PLAINTEXT, KafkaSecurity
from streamctl.stack.kafka_tools import TOOLS, UnknownToolError, client_properties, tool_command

JAVA, JARS, LOG4J = Path("/jdk/bin/java"), [Path("/m2/a.jar"), Path("/m2/b.jar")], Path("/l.xml")


def command(tool: str, *args: str, config: Path | None = None) -> list[str]:
    return tool_command(tool, args, java=JAVA, classpath=JARS, log4j=LOG4J,
                        bootstrap_servers="127.0.0.1:9092", command_config=config)


def test_the_tool_runs_its_main_class_on_the_brokers_classpath_with_the_broker_address() -> None:
    cmd = command("console-consumer", "--topic", "t")
    assert cmd[0] == str(JAVA) and "-Dlog4j2.configurationFile=/l.xml" in cmd
    assert cmd[cmd.index("-cp") + 1] == "/m2/a.jar:/m2/b.jar"
    main = cmd.index("org.apache.kafka.tools.consumer.ConsoleConsumer")
    assert cmd[main + 1:] == ["--bootstrap-server", "127.0.0.1:9092", "--topic", "t"]


def test_an_address_or_config_the_user_gave_is_kept() -> None:
    cmd = command("topics", "--bootstrap-server", "k:1", "--list",
                  "--command-config", "mine.properties", config=Path("/s/client.properties"))
    assert cmd[cmd.index("org.apache.kafka.tools.TopicCommand") + 1:] == [
        "--bootstrap-server", "k:1", "--list", "--command-config", "mine.properties"]


def test_a_secured_broker_gets_the_client_properties_file() -> None:
    cmd = command("consumer-groups", "--list", config=Path("/s/client.properties"))
    assert cmd[-2:] == ["--command-config", "/s/client.properties"]


def test_the_tools_are_kafkas_scripts_by_name() -> None:
    assert list(TOOLS) == ["console-consumer", "console-producer", "topics", "consumer-groups",
                           "get-offsets", "transactions", "configs", "delete-records"]
    assert TOOLS["configs"] == "kafka.admin.ConfigCommand"  # in the broker's core jar
    assert TOOLS["delete-records"] == "org.apache.kafka.tools.DeleteRecordsCommand"


def test_configs_and_delete_records_get_the_broker_address_and_the_client_properties() -> None:
    for tool, args in (("configs", ("--entity-type", "topics", "--describe")),
                       ("delete-records", ("--offset-json-file", "f.json"))):
        cmd = command(tool, *args, config=Path("/s/client.properties"))
        assert cmd[cmd.index(TOOLS[tool]) + 1:] == [
            "--bootstrap-server", "127.0.0.1:9092", *args,
            "--command-config", "/s/client.properties"]


def test_an_unknown_tool_names_the_known_ones() -> None:
    with pytest.raises(UnknownToolError, match="no Kafka tool 'dump'; the tools are: "
                                               "console-consumer, console-producer"):
        command("dump")


def test_client_properties_carry_the_login_and_the_ca_and_none_are_needed_on_plaintext(
        tmp_path: Path) -> None:
    assert client_properties(PLAINTEXT) is None
    secured = KafkaSecurity("SASL_SSL", "SCRAM-SHA-512", "job", 'pa"ss\\word',
                            str(tmp_path / "ca.pem"))
    text = client_properties(secured)
    assert text is not None
    lines = dict(line.split("=", 1) for line in text.splitlines())
    assert lines["security.protocol"] == "SASL_SSL"
    assert lines["sasl.mechanism"] == "SCRAM-SHA-512"
    assert lines["ssl.truststore.location"] == str(tmp_path / "ca.pem")
    assert lines["sasl.jaas.config"].startswith("org.apache.kafka.common.security.scram.")
    assert '\\\\' in lines["sasl.jaas.config"]  # a backslash survives the properties format
