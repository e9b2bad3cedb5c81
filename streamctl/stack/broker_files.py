"""The broker's files and command lines, as pure functions of its settings.

Owns the on-disk layout under `<state>/kafka/`, the rendering of server.properties from
`streamctl/stack/templates/` (plain, or secured: SASL_SSL listeners, SCRAM, ACLs), Kafka's
cluster-id format and the `java` command line. No processes are
started here. Neighbour: `broker`, which does the starting.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from string import Template

from streamctl.security.kafka import KafkaSecurity

TEMPLATES = Path(__file__).with_name("templates")


@dataclass(frozen=True)
class BrokerLayout:
    """Where a broker keeps its files: everything under `<state>/kafka/`."""

    root: Path

    @property
    def server_properties(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j_config(self) -> Path:
        return self.root / "log4j2.xml"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "broker.log"

    @property
    def pid_file(self) -> Path:
        return self.root / "broker.pid"

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "meta.properties").is_file()


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """Kafka's cluster id format: 16 random bytes, URL-safe base64 without padding.

    An id starting with '-' would be read as an option by the storage tool's command line
    (about 1 start in 64); like Kafka's own `Uuid.randomUuid`, draw again.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class Quorum:
    """A node's place in its KRaft cluster: its id and every voter's controller port (all on
    loopback). Every node of a local cluster is a voter, so the quorum has as many members as
    the cluster has brokers."""

    node_id: int
    voters: Mapping[int, int]
    """Node id -> controller port, this node's included."""

    @classmethod
    def alone(cls, controller_port: int) -> Quorum:
        """A single broker: node 1, its own and only voter."""
        return cls(1, {1: controller_port})

    @property
    def size(self) -> int:
        return len(self.voters)

    def voters_property(self) -> str:
        return ",".join(f"{n}@127.0.0.1:{p}" for n, p in sorted(self.voters.items()))


@dataclass(frozen=True)
class Replication:
    """How many copies of each partition a cluster of a given size keeps, and how many must
    have a write before an acks=all producer is told it is committed."""

    replicas: int
    min_insync: int

    @classmethod
    def of(cls, replicas: int) -> Replication:
        """All replicas but one must be in sync (one may be lost or down without losing a
        committed record or stopping writes); a single replica must be itself."""
        return cls(replicas, max(1, replicas - 1))

    @classmethod
    def for_brokers(cls, brokers: int) -> Replication:
        """Three replicas (two in sync) on three brokers or more, one on a single broker."""
        return cls.of(max(1, min(3, brokers)))


def render_server_properties(port: int, controller_port: int, data_dir: Path,
                             quorum: Quorum | None = None) -> str:
    quorum = quorum or Quorum.alone(controller_port)
    replication = Replication.for_brokers(quorum.size)
    single = quorum.size == 1
    template = Template((TEMPLATES / "server.properties").read_text())
    return template.substitute(
        port=port, controller_port=controller_port, data_dir=data_dir,
        node_id=quorum.node_id, voters=quorum.voters_property(),
        replicas=replication.replicas, min_insync=replication.min_insync,
        # A single broker keeps the counts its state dirs were formatted with (a changed count
        # would move every group and transactional id to another coordinator partition); a
        # cluster spreads its coordinators over a few partitions, not Kafka's 50, on 2 cores.
        offsets_partitions=1 if single else 6, transaction_partitions=50 if single else 6,
    )  # fmt: skip


def java_command(
    java: Path, classpath: Sequence[Path], log4j: Path, heap: str, main: str, *args: str
) -> list[str]:
    return [
        str(java), f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError",
        # log4j2's own shutdown hook would close the appenders while Kafka is still logging
        # its controlled shutdown; stdout needs no closing, so keep logging to the very end.
        "-Djava.awt.headless=true", "-Dlog4j2.shutdownHookEnabled=false",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp", os.pathsep.join(str(jar) for jar in classpath), main, *args,
    ]  # fmt: skip


@dataclass(frozen=True)
class SecureListeners:
    """Where a secured broker listens: SASL_SSL client listeners by name, and its controller.

    The local broker has one client listener on loopback; the compose broker has one for the
    other containers and one for the Docker host. The first listener is the inter-broker one.
    """

    bind: Mapping[str, str]
    """Listener name -> host:port to bind, e.g. {"SECURE": "127.0.0.1:9092"}."""
    advertised: Mapping[str, str]
    """Listener name -> host:port clients are told to use (its certificate must name it)."""
    controller_bind: str
    controller_voter: str
    """host:port of this node's controller as the broker dials it (in the certificate too)."""


def render_secure_properties(
    listeners: SecureListeners,
    data_dir: Path | str,
    tls: SecureBrokerFiles,
    admin: str,
    admin_password: str,
    mechanism: str = "SCRAM-SHA-512",
) -> str:
    """server.properties of a broker whose clients must use SASL_SSL (see the template)."""
    names = list(listeners.bind)
    jaas = KafkaSecurity("SASL_SSL", mechanism, admin, admin_password).jaas_config()
    client_jaas = "\n".join(
        f"listener.name.{n.lower()}.{mechanism.lower()}.sasl.jaas.config={jaas}" for n in names
    )
    template = Template((TEMPLATES / "server-secure.properties").read_text())
    return template.substitute(
        controller_voter=listeners.controller_voter,
        listeners=",".join(
            [f"{n}://{a}" for n, a in listeners.bind.items()]
            + [f"CONTROLLER://{listeners.controller_bind}"]
        ),
        advertised_listeners=",".join(f"{n}://{a}" for n, a in listeners.advertised.items()),
        inter_broker_listener=names[0],
        protocol_map=",".join([f"{n}:SASL_SSL" for n in names] + ["CONTROLLER:SASL_SSL"]),
        data_dir=data_dir,
        keystore=tls.keystore,
        key_password=tls.key_password,
        truststore=tls.truststore,
        mechanism=mechanism,
        admin=admin,
        admin_password=admin_password,
        client_jaas=client_jaas,
    )  # fmt: skip


@dataclass(frozen=True)
class SecureBrokerFiles:
    """The broker's TLS material as the broker sees it (paths may be inside a container)."""

    keystore: str
    """PKCS#12: the key and its certificate chain."""
    key_password: str
    """The keystore's and the key's password."""
    truststore: str
    """PEM: the CA certificate."""
