"""A real Apache Kafka 4.x broker (KRaft, combined broker+controller) for local use: a single
node, or one node of a local cluster (`cluster`).

Owns the broker's life cycle in its directory (`<state>/kafka/`, or a cluster node's): writing
its config files, formatting
storage on first start, launching `java kafka.Kafka` detached with its output in `broker.log`,
readiness by a real metadata request, controlled shutdown, and status. Plain by default; with
`secure=True` its only client listener is SASL_SSL (SCRAM users, a throwaway CA under
`<state>/secure/`, the ACLs of `acls.streamctl_acls`), and a state dir keeps the mode it was
formatted with. Neighbours:
`broker_files` (layout, rendering), `maven` (classpath), `jvm`, `ports`, `process`,
`kafka_admin` (readiness); `cli` drives it; test fixtures use `LocalBroker` directly.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from streamctl.security.kafka import PLAINTEXT, KafkaSecurity
from streamctl.stack import acls
from streamctl.stack.broker_files import (
    TEMPLATES,
    BrokerLayout,
    Quorum,
    SecureBrokerFiles,
    SecureListeners,
    java_command,
    new_cluster_id,
    render_secure_properties,
    render_server_properties,
)
from streamctl.stack.defaults import DEFAULT_PORT, default_state_dir
from streamctl.stack.errors import (
    BrokerConflictError,
    BrokerExitedError,
    BrokerFormatError,
    BrokerNotReadyError,
    StackError,
)
from streamctl.stack.jvm import require_java
from streamctl.stack.kafka_admin import admin_client, broker_ids
from streamctl.stack.maven import BROKER_POM, resolve_classpath
from streamctl.stack.process import PidRecord, is_alive, tail, terminate
from streamctl.stack.secure import ADMIN, MECHANISM, USERS, SecureFiles, write_secure_files
from streamctl.stack.tcp import HOST, check_ports_free
from streamctl.stack.waiting import Deadline

_FORMAT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    ready: bool
    pid: int | None
    port: int | None
    controller_port: int | None
    layout: BrokerLayout
    label: str = "broker"
    """"broker", or "node <id>" on a cluster."""

    def describe(self) -> str:
        if not self.running:
            return f"{self.label}: not running (state {self.layout.root})"
        health = "ready" if self.ready else "NOT answering metadata requests"
        return (
            f"{self.label}: running, {health}; pid {self.pid}, listener {HOST}:{self.port}, "
            f"controller {HOST}:{self.controller_port}; log {self.layout.log_file}"
        )


@dataclass(frozen=True)
class ClusterNode:
    """Where one broker keeps its files and which quorum it belongs to."""

    root: Path
    """Its config, data, log and pid file (`<state>/kafka/` for a single broker)."""
    quorum: Quorum
    cluster_id: Callable[[], str]
    """The id its storage is formatted with: every node of a cluster must share one."""


class LocalBroker:
    """One broker per state dir. `start` and `stop` are idempotent; also a context manager."""

    def __init__(
        self,
        state_dir: Path | None = None,
        port: int = DEFAULT_PORT,
        controller_port: int | None = None,
        *,
        heap: str = "768m",
        classpath: Sequence[Path] | None = None,
        maven_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        secure: bool | None = None,
        node: ClusterNode | None = None,
    ) -> None:
        """`classpath` skips Maven (tests); `maven_dir` defaults to `<state>/maven`; `secure`
        starts the SASL_SSL broker with ACLs instead of the plain one (None: as the state dir
        was formatted, plain for a new one); `node` makes it one node of a local cluster
        (`streamctl.stack.cluster`) instead of a single broker under `<state>/kafka/`."""
        # Absolute, because the broker runs with its own cwd and the pid check matches paths.
        self.state_dir = Path(state_dir or default_state_dir()).resolve()
        self.port = port
        self.controller_port = controller_port if controller_port is not None else port + 1
        if self.controller_port == self.port:
            raise StackError(f"the controller port must differ from the listener port {port}")
        self.node = node or ClusterNode(
            self.state_dir / "kafka", Quorum.alone(self.controller_port), new_cluster_id)
        if self.node.quorum.voters.get(self.node.quorum.node_id) != self.controller_port:
            raise StackError(f"node {self.node.quorum.node_id} is not a voter on its "
                             f"controller port {self.controller_port}")
        if secure and self.node.quorum.size > 1:
            raise StackError("a secured broker runs alone: a secured cluster is not built yet")
        self.layout = BrokerLayout(self.node.root)
        self._heap = heap
        self._classpath = list(classpath) if classpath is not None else None
        self._maven_dir = maven_dir or self.state_dir / "maven"
        self._env = dict(os.environ if env is None else env)
        self._child: subprocess.Popen[bytes] | None = None
        self.secure = secure if secure is not None else self._secured_marker.exists()
        self.secure_files = SecureFiles(self.state_dir / "secure")

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def client_security(self, user: str = ADMIN) -> KafkaSecurity:
        """How `user` connects to this broker (any user connects to a plain one)."""
        return self.secure_files.client(user) if self.secure else PLAINTEXT

    def start(self, timeout_s: float = 60.0) -> bool:
        """Start and wait until ready. False if this state dir's broker was already running."""
        deadline = Deadline.after(timeout_s)
        started = self.launch()
        self.await_ready(deadline)
        return started

    def launch(self) -> bool:
        """Start the process without waiting for it (a cluster launches every node before any
        can answer: a broker serves only once a majority of voters is up). False if it was
        already running."""
        running = self._running_record()
        if running is not None:
            self._check_same_ports(running)
            return False
        java = require_java(self._env)
        check_ports_free(
            [
                (self.port, "Kafka listener", "--port"),
                (self.controller_port, "KRaft controller", "--controller-port"),
            ]
        )
        classpath = self.classpath()
        self._check_mode()
        self._write_configs()
        if not self.layout.formatted:
            self._format(java, classpath)
        self._launch(java, classpath)
        return True

    def await_ready(self, deadline: Deadline) -> None:
        """Until the broker answers a metadata request (and, secured, has its users and ACLs);
        stopped again if it does not."""
        record = PidRecord.read(self.layout.pid_file)
        if record is None:
            raise BrokerExitedError(f"the Kafka broker of {self.layout.root} was not started")
        try:
            self._await_ready(record.pid, deadline)
            if self.secure:
                self._grant(deadline)
        except StackError:
            self.stop(timeout_s=10.0)
            raise

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Controlled shutdown (SIGTERM), SIGKILL after `timeout_s`. False if not running."""
        record = self._running_record()
        if record is not None:
            child = self._child if self._child and self._child.pid == record.pid else None
            terminate(record.pid, timeout_s, child)
        self.layout.pid_file.unlink(missing_ok=True)
        self._child = None
        return record is not None

    def status(self, probe_timeout_s: float = 2.0) -> BrokerStatus:
        record = self._running_record()
        if record is None:
            return BrokerStatus(False, False, None, None, None, self.layout, self.label)
        bootstrap = f"{HOST}:{record.port}"
        admin = admin_client(bootstrap, self.client_security())
        ready = broker_ids(admin, probe_timeout_s) is not None
        return BrokerStatus(
            True, ready, record.pid, record.port, record.controller_port, self.layout, self.label
        )

    @property
    def label(self) -> str:
        quorum = self.node.quorum
        return "broker" if quorum.size == 1 else f"node {quorum.node_id}"

    def classpath(self) -> list[Path]:
        """The broker's jars: given at construction, else resolved by Maven (cached)."""
        if self._classpath is None:
            self._classpath = resolve_classpath(BROKER_POM, self._maven_dir)
        return self._classpath

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _running_record(self) -> PidRecord | None:
        """This state dir's live broker, clearing a pid file left by one that died."""
        record = PidRecord.read(self.layout.pid_file)
        if record is None:
            return None
        if is_alive(record.pid, str(self.layout.server_properties)):
            return record
        self.layout.pid_file.unlink(missing_ok=True)
        return None

    def _check_same_ports(self, running: PidRecord) -> None:
        if (running.port, running.controller_port) != (self.port, self.controller_port):
            raise BrokerConflictError(
                f"the broker of {self.state_dir} already runs on port {running.port} "
                f"(controller {running.controller_port}), not {self.port}: stop it with "
                "`streamctl stack down` or use another STREAMCTL_STATE_DIR."
            )

    @property
    def _secured_marker(self) -> Path:
        return self.layout.root / "secured"

    def _check_mode(self) -> None:
        """A state dir formatted plain has no admin user; one formatted secured needs one."""
        marker = self._secured_marker
        if not self.layout.formatted:
            marker.unlink(missing_ok=True)
            if self.secure:
                self.layout.root.mkdir(parents=True, exist_ok=True)
                marker.touch()
            return
        if marker.exists() != self.secure:
            was, asked = ("secured", "plain") if marker.exists() else ("plain", "secured")
            raise BrokerConflictError(
                f"the broker of {self.state_dir} was formatted {was}, not {asked}: use another "
                "STREAMCTL_STATE_DIR, or delete its kafka/ directory to start afresh"
            )

    def _write_configs(self) -> None:
        self.layout.data_dir.mkdir(parents=True, exist_ok=True)
        if self.secure:
            files = write_secure_files(self.secure_files.root)
            properties = render_secure_properties(
                SecureListeners(
                    {"SECURE": f"{HOST}:{self.port}"}, {"SECURE": f"{HOST}:{self.port}"},
                    f"{HOST}:{self.controller_port}", f"{HOST}:{self.controller_port}",
                ),
                self.layout.data_dir,
                SecureBrokerFiles(
                    str(files.kafka_keystore), files.kafka_key_password.read_text().strip(),
                    str(files.ca),
                ),
                ADMIN,
                files.password(ADMIN),
            )
        else:
            properties = render_server_properties(
                self.port, self.controller_port, self.layout.data_dir, self.node.quorum
            )
        # It holds passwords when secured: never readable by others, not even for a moment.
        fd = os.open(self.layout.server_properties, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(properties)
        self.layout.log4j_config.write_text((TEMPLATES / "log4j2.xml").read_text())

    def _grant(self, deadline: Deadline) -> None:
        """The SCRAM users other than the admin (made at format time), and the ACLs."""
        admin = admin_client(self.bootstrap_servers, self.client_security())
        users = {u: self.secure_files.password(u) for u in USERS if u != ADMIN}
        acls.upsert_scram_users(admin, users, max(deadline.remaining_s(), 5.0))
        acls.apply_acls(admin, acls.streamctl_acls(), max(deadline.remaining_s(), 5.0))

    def _format(self, java: Path, classpath: Sequence[Path]) -> None:
        args: tuple[str, ...] = (
            "format", "-t", self.node.cluster_id(), "-c", str(self.layout.server_properties),
        )  # fmt: skip
        if self.secure:
            # The broker logs in to itself as the admin, so that user must exist before the
            # first start: KRaft stores it in the bootstrap metadata.
            password = self.secure_files.password(ADMIN)
            args += ("--add-scram", f"{MECHANISM}=[name={ADMIN},password={password}]")
        cmd = java_command(
            java, classpath, self.layout.log4j_config, "256m", "kafka.tools.StorageTool", *args
        )
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                env=self._env,
                timeout=_FORMAT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BrokerFormatError(f"formatting {self.layout.data_dir} timed out") from exc
        if proc.returncode != 0 or not self.layout.formatted:
            output = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise BrokerFormatError(
                f"formatting the KRaft storage in {self.layout.data_dir} failed "
                f"(exit {proc.returncode}); remove that directory to start afresh:\n{output}"
            )

    def _launch(self, java: Path, classpath: Sequence[Path]) -> int:
        log = self.layout.log_file
        if log.exists():
            log.replace(log.with_name(log.name + ".1"))  # keep the previous run for post-mortems
        cmd = java_command(
            java,
            classpath,
            self.layout.log4j_config,
            self._heap,
            "kafka.Kafka",
            str(self.layout.server_properties),
        )
        with log.open("ab") as out:
            # A new session: the broker outlives `stack up` and ignores the terminal's Ctrl-C.
            self._child = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self.layout.root,
                start_new_session=True,
            )
        PidRecord(self._child.pid, self.port, self.controller_port).write(self.layout.pid_file)
        return self._child.pid

    def _await_ready(self, pid: int, deadline: Deadline) -> None:
        admin = admin_client(self.bootstrap_servers, self.client_security())
        marker = str(self.layout.server_properties)
        while True:
            if not is_alive(pid, marker):
                code = self._child.poll() if self._child else None
                raise BrokerExitedError(
                    f"the Kafka broker exited during start-up (exit code {code}); last lines of "
                    f"{self.layout.log_file}:\n{tail(self.layout.log_file)}"
                )
            if broker_ids(admin, min(1.0, deadline.remaining_s())) is not None:
                return
            if deadline.expired():
                raise BrokerNotReadyError(
                    f"the Kafka broker on {self.bootstrap_servers} did not answer a metadata "
                    f"request in time; last lines of {self.layout.log_file}:\n"
                    f"{tail(self.layout.log_file)}"
                )
