"""A local Kafka cluster: several KRaft nodes from the same Apache artifacts as the single broker.

Every node runs in combined mode (broker and controller voter in one JVM), so three nodes are
three processes, not six: on a 2-core machine the separate controller quorum a production
cluster would run costs more than it shows. A quorum of three voters survives the loss of one,
as three replicas do, so losing any one node is what the cluster is built to tolerate.

Owns the cluster's layout under `<state>/kafka-cluster/` (one directory per node, the shared
cluster id), port assignment (node n listens on `port + 2(n-1)`, its controller one above),
launching every node before awaiting any (a node serves only once a majority of voters is up),
readiness of the whole cluster (every node registered), stop and status. Neighbours: `broker`
(one node), `cli` (`stack up --brokers N`), test fixtures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streamctl.stack.broker import BrokerStatus, ClusterNode, LocalBroker
from streamctl.stack.broker_files import Quorum, new_cluster_id
from streamctl.stack.defaults import DEFAULT_PORT, default_state_dir
from streamctl.stack.errors import BrokerConflictError, BrokerNotReadyError, StackError
from streamctl.stack.kafka_admin import admin_client, broker_ids
from streamctl.stack.process import tail
from streamctl.stack.tcp import HOST
from streamctl.stack.waiting import Deadline, poll_until

CLUSTER_DIR = "kafka-cluster"


def cluster_ports(base_port: int, size: int) -> dict[int, tuple[int, int]]:
    """Node id -> (listener port, controller port): node n on `base + 2(n-1)` and the next."""
    return {n: (base_port + 2 * (n - 1), base_port + 2 * (n - 1) + 1) for n in range(1, size + 1)}


class LocalCluster:
    """`size` nodes under one state dir; `start` and `stop` are idempotent."""

    def __init__(
        self,
        state_dir: Path | None = None,
        size: int = 3,
        port: int = DEFAULT_PORT,
        *,
        ports: Mapping[int, tuple[int, int]] | None = None,
        heap: str = "512m",
        classpath: Sequence[Path] | None = None,
        maven_dir: Path | None = None,
    ) -> None:
        """`ports` (node id -> listener, controller) overrides the layout from `port` (tests
        take free ports)."""
        if size < 2:
            raise StackError(f"a cluster needs at least 2 brokers, not {size}: the single "
                             "broker is `streamctl stack up` without --brokers")
        self.state_dir = Path(state_dir or default_state_dir()).resolve()
        self.root = self.state_dir / CLUSTER_DIR
        layout = dict(ports or cluster_ports(port, size))
        if sorted(layout) != list(range(1, size + 1)):
            raise StackError(f"cluster ports must name nodes 1..{size}, not {sorted(layout)}")
        voters = {n: controller for n, (_listener, controller) in layout.items()}
        self.nodes = tuple(
            LocalBroker(
                self.state_dir, listener, controller, heap=heap, classpath=classpath,
                maven_dir=maven_dir or self.state_dir / "maven", secure=False,
                node=ClusterNode(self.root / f"node-{n}", Quorum(n, voters), self._cluster_id),
            )
            for n, (listener, controller) in sorted(layout.items())
        )  # fmt: skip

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes)

    def node(self, node_id: int) -> LocalBroker:
        return self.nodes[node_id - 1]

    def start(self, timeout_s: float = 120.0) -> bool:
        """Launch every node, then wait until each answers and all are registered. False if
        every node was already running."""
        deadline = Deadline.after(timeout_s)
        self._check_not_a_single_broker()
        launched = [node.launch() for node in self.nodes]
        try:
            for node in self.nodes:
                node.await_ready(deadline)
            self.await_registered(deadline)
        except StackError:
            self.stop(timeout_s=10.0)
            raise
        return any(launched)

    def await_registered(self, deadline: Deadline) -> None:
        """Until a metadata request lists every node as a live broker."""
        admin = admin_client(self.bootstrap_servers)
        expected = [node.node.quorum.node_id for node in self.nodes]
        registered = poll_until(
            lambda: True if broker_ids(admin, 1.0) == expected else None,
            deadline.remaining_s(), 0.2)
        if registered is None:
            raise BrokerNotReadyError(
                f"the cluster on {self.bootstrap_servers} did not list brokers {expected} in "
                "time; last lines of each node's log:\n" + "\n".join(
                    f"--- {node.layout.log_file}\n{tail(node.layout.log_file, 10)}"
                    for node in self.nodes))

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Every node at once. One by one, the last would wait out its timeout: a combined
        node's controlled shutdown needs a quorum, which is gone once two voters have left.
        False if none was running."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            return any(list(pool.map(lambda node: node.stop(timeout_s), self.nodes)))

    def status(self, probe_timeout_s: float = 2.0) -> list[BrokerStatus]:
        return [node.status(probe_timeout_s) for node in self.nodes]

    @classmethod
    def found(cls, state_dir: Path | None = None) -> LocalCluster | None:
        """The state dir's cluster, if one was ever formatted there (stop and status read
        each node's ports from its pid file, whatever `--port` it was started with)."""
        root = Path(state_dir or default_state_dir()).resolve() / CLUSTER_DIR
        nodes = list(root.glob("node-*/data/meta.properties"))
        return cls(state_dir, len(nodes)) if nodes else None

    def _cluster_id(self) -> str:
        """Made once, when the first node is formatted, and kept beside the nodes."""
        path = self.root / "cluster.id"
        if not path.is_file():
            self.root.mkdir(parents=True, exist_ok=True)
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()

    def _check_not_a_single_broker(self) -> None:
        single = LocalBroker(self.state_dir).status(probe_timeout_s=0.5)
        if single.running:
            raise BrokerConflictError(
                f"the single broker of {self.state_dir} runs on {HOST}:{single.port}: stop it "
                "with `streamctl stack down` first, or use another STREAMCTL_STATE_DIR")


def describe(statuses: Sequence[BrokerStatus]) -> str:
    return "\n".join(status.describe() for status in statuses)
