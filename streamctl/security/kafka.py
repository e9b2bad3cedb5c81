"""How every streamctl Kafka client authenticates and encrypts: one frozen setting.

Owns the names of the `STREAMCTL_KAFKA_*` variables, their validation (a message naming the
variable to set or fix), and the two renderings of the same setting: librdkafka properties for
confluent-kafka clients (`librdkafka()`) and `kafka.*` options for Spark's Kafka source and sink
(`spark_options()`), and `client_config`, the one builder of a confluent-kafka client's
configuration: where Kafka is, how to log in, then the client's own settings (`IDEMPOTENT` for
every producer). Nothing else in the project spells a security property or `bootstrap.servers`.
Imports nothing of the project (see the package docstring).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from streamctl.security.env import Variables

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")

ENV_NAMES = {
    "protocol": "STREAMCTL_KAFKA_SECURITY_PROTOCOL",
    "sasl_mechanism": "STREAMCTL_KAFKA_SASL_MECHANISM",
    "username": "STREAMCTL_KAFKA_SASL_USERNAME",
    "password": "STREAMCTL_KAFKA_SASL_PASSWORD",
    "ssl_ca_file": "STREAMCTL_KAFKA_SSL_CA_FILE",
}
"""The variable each field is read from."""

PASSWORD_FILE_ENV = "STREAMCTL_KAFKA_SASL_PASSWORD_FILE"
PASSWORD_FILE_MEANING = ("File holding the SASL password (a Docker secret; surrounding "
                         "whitespace ignored); the alternative to STREAMCTL_KAFKA_SASL_PASSWORD, "
                         "which `ps e` and `docker inspect` show.")
_VARIABLES = Variables(ENV_NAMES, "password", PASSWORD_FILE_ENV)

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class KafkaSecurityError(ValueError):
    """The Kafka client-security setting is unusable; the message names what to set or fix."""


@dataclass(frozen=True)
class KafkaSecurity:
    """The client side of a Kafka listener's security; the default is the plain local broker."""

    protocol: str = "PLAINTEXT"
    """Kafka security protocol: PLAINTEXT (the local broker, the default compose file), SSL,
    SASL_PLAINTEXT or SASL_SSL (the secured local broker and compose override)."""

    sasl_mechanism: str = "SCRAM-SHA-512"
    """SASL mechanism for the SASL_* protocols: SCRAM-SHA-512 (the default: the password never
    crosses the wire), SCRAM-SHA-256 or PLAIN."""

    username: str = ""
    """SASL username, the principal Kafka's ACLs name (`User:<username>`); required for SASL_*."""

    password: str = field(default="", repr=False)
    """SASL password; prefer STREAMCTL_KAFKA_SASL_PASSWORD_FILE (a Docker secret)."""

    ssl_ca_file: str = ""
    """PEM file of the CA certificates that signed the broker's certificate, for SSL and
    SASL_SSL; unset trusts the system's (librdkafka) or the JVM's (Spark) default CAs."""

    def __post_init__(self) -> None:
        problem = _problem({f.name: getattr(self, f.name) for f in fields(self)}, str)
        if problem:
            raise KafkaSecurityError(problem)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        return self.protocol.endswith("SSL")

    def librdkafka(self) -> dict[str, str]:
        """The security properties of a confluent-kafka client (no `bootstrap.servers`)."""
        config = {"security.protocol": self.protocol.lower()}
        if self.uses_sasl:
            config |= {"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username,
                       "sasl.password": self.password}
        if self.uses_tls and self.ssl_ca_file:
            config["ssl.ca.location"] = self.ssl_ca_file
        return config

    def java_properties(self) -> dict[str, str]:
        """The same setting as a Java Kafka client's properties. The Java client reads a PEM
        truststore directly."""
        properties = {"security.protocol": self.protocol}
        if self.uses_sasl:
            properties |= {"sasl.mechanism": self.sasl_mechanism,
                           "sasl.jaas.config": self.jaas_config()}
        if self.uses_tls and self.ssl_ca_file:
            properties |= {"ssl.truststore.type": "PEM",
                           "ssl.truststore.location": self.ssl_ca_file}
        return properties

    def spark_options(self) -> dict[str, str]:
        """The same setting as options of Spark's Kafka source and sink (`kafka.` + the Java
        client's property)."""
        return {f"kafka.{key}": value for key, value in self.java_properties().items()}

    def jaas_config(self) -> str:
        """`sasl.jaas.config` of a Java Kafka client logging in as `username`."""
        return (f'{_JAAS_MODULES[self.sasl_mechanism]} required '
                f'username="{_jaas_quoted(self.username)}" '
                f'password="{_jaas_quoted(self.password)}";')

    def describe(self) -> str:
        """One line for start-up logs: never the password."""
        if not self.uses_sasl:
            return self.protocol
        return f"{self.protocol} {self.sasl_mechanism} as {self.username}"



IDEMPOTENT: dict[str, Any] = {"enable.idempotence": True, "acks": "all",
                              "max.in.flight.requests.per.connection": 1}
"""Every streamctl producer: a retry never duplicates a record, a record is acknowledged
once every in-sync replica has it, and one request is in flight per broker.

Why one (KAFKA-15591): a broker that holds no state for a producer accepts any first
sequence number. With two requests in flight to a partition the broker is only just
leading (a topic created a moment ago, a leader elected), the first can fail with a
retriable NOT_LEADER_OR_FOLLOWER and the second land; librdkafka then takes the second's
acknowledgement for the first's too and reports the records never written as delivered.
The suite saw it twice: the first records of a load into fresh topics, acknowledged and
absent. Kafka 4.5 fixes it only for partitions never written to; one request in flight
closes it on every broker, at no measured cost (`docs/guarantees.md`)."""


DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
"""Where every streamctl command finds Kafka unless told: the local stack's listener."""


def client_config(bootstrap_servers: str, security: KafkaSecurity | None = None,
                  **settings: Any) -> dict[str, Any]:
    """librdkafka settings of one client: where Kafka is, how it authenticates, then its own
    (a setting given here wins)."""
    return {"bootstrap.servers": bootstrap_servers,
            **(security or PLAINTEXT).librdkafka(), **settings}


def from_env(env: Mapping[str, str] | None = None) -> KafkaSecurity:
    """The setting in the environment (read once at start-up), validated with messages that name
    the variables; nothing set means PLAINTEXT."""
    env = os.environ if env is None else env
    values = _VARIABLES.read(env, KafkaSecurityError)
    if "protocol" in values:
        values["protocol"] = values["protocol"].upper()
    if "sasl_mechanism" in values:
        values["sasl_mechanism"] = values["sasl_mechanism"].upper()
    problem = _problem({f.name: values.get(f.name, f.default) for f in fields(KafkaSecurity)},
                       _VARIABLES.name)
    ca_file = values.get("ssl_ca_file", "")
    if not problem and ca_file and not Path(ca_file).is_file():
        # Checked here, where the process starts, not on construction: a setting may be
        # rendered for another machine (a container's tool configuration).
        problem = f"{ENV_NAMES['ssl_ca_file']}={ca_file}: no such file"
    if problem:
        raise KafkaSecurityError(problem)
    return KafkaSecurity(**values)


def from_env_raising(error: Callable[[str], Exception],
                     env: Mapping[str, str] | None = None) -> KafkaSecurity:
    """`from_env` for a process that stops on its own error: a bad setting raises
    `error("Kafka security: …")`, in the same words whichever process it stops."""
    try:
        return from_env(env)
    except KafkaSecurityError as exc:
        raise error(f"Kafka security: {exc}") from None


def _problem(v: Mapping[str, Any], name: Callable[[str], str]) -> str | None:
    """The first thing wrong with the field values `v`, worded with `name(field)`; None when
    they are usable."""
    protocol, ca_file = v["protocol"], v["ssl_ca_file"]
    sasl, tls = protocol.startswith("SASL_"), protocol.endswith("SSL")
    if protocol not in PROTOCOLS:
        return f"{name('protocol')}={protocol!r} is not one of {', '.join(PROTOCOLS)}"
    if v["sasl_mechanism"] not in MECHANISMS:
        return (f"{name('sasl_mechanism')}={v['sasl_mechanism']!r} is not one of "
                f"{', '.join(MECHANISMS)}")
    if sasl and not v["username"]:
        return f"{name('username')} is required with {name('protocol')}={protocol}"
    if sasl and not v["password"]:
        return (f"{name('password')} is required with {name('protocol')}={protocol} (user "
                f"{v['username']})")
    if not sasl and (v["username"] or v["password"]):
        return (f"{name('username')} and {name('password')} only apply to SASL_SSL or "
                f"SASL_PLAINTEXT, but {name('protocol')}={protocol}: the credentials would "
                "be ignored")
    if ca_file and not tls:
        return (f"{name('ssl_ca_file')} only applies to SSL or SASL_SSL, but "
                f"{name('protocol')}={protocol}")
    return None


def _jaas_quoted(text: str) -> str:
    """Inside a JAAS option's double quotes, a backslash and a quote must be escaped."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


PLAINTEXT = KafkaSecurity()
"""No security: the plain local broker and the default compose file."""
