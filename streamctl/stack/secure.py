"""The secured stack's secrets: who the principals are and which files hold their credentials.

Owns the SCRAM users (an admin, the controller, the jobs, the load generator), the layout of a
secrets directory and its generation: a throwaway CA, the broker's and the metrics endpoints'
certificates, a random password per user. The same layout serves the secured local broker
(`<state>/secure/`, hosts 127.0.0.1 and localhost) and compose (`deploy/secrets/`, as Docker
secrets). Existing files are kept, so generating again changes nothing. Neighbours: `tls` (the
certificates), `acls` (what each user may do), `broker` (uses the files), `cli`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas import auth
from streamctl.security.kafka import ENV_NAMES, PASSWORD_FILE_ENV, KafkaSecurity
from streamctl.stack import tls
from streamctl.stack.broker_files import (
    SecureBrokerFiles,
    SecureListeners,
    render_secure_properties,
)

ADMIN = "admin"
"""Super user: the broker's own inter-broker login, topic and ACL administration."""
CONTROLLER = "streamctl-controller"
JOB = "streamctl-job"
LOAD = "streamctl-load"
USERS = (ADMIN, CONTROLLER, JOB, LOAD)
MECHANISM = "SCRAM-SHA-512"
METRICS_USER = "prometheus"
"""The username scrapes present to the metrics endpoints (basic auth)."""

LOCAL_HOSTS = ("127.0.0.1", "localhost")

# The compose secure override (docker-compose.secure.yml): Kafka's in-network listener for the
# containers and its host listener; the scraped services; where the secrets appear.
COMPOSE_KAFKA_HOSTS = ("kafka", "localhost", "127.0.0.1")
COMPOSE_METRICS_HOSTS = ("controller", "job", "job-standby", "localhost", "127.0.0.1")
COMPOSE_SECRETS = "/run/secrets"
COMPOSE_LISTENERS = SecureListeners(
    bind={"INTERNAL": "0.0.0.0:19092", "HOST": "0.0.0.0:9092"},
    advertised={"INTERNAL": "kafka:19092", "HOST": "localhost:9092"},
    controller_bind="0.0.0.0:9093", controller_voter="kafka:9093")
COMPOSE_DATA_DIR = "/var/lib/kafka/data"


@dataclass(frozen=True)
class SecureFiles:
    """A secrets directory (every file a Docker secret of the same name in compose)."""

    root: Path

    @property
    def ca(self) -> Path:
        """The CA certificate every client trusts."""
        return self.root / "ca.pem"

    @property
    def kafka_keystore(self) -> Path:
        """The broker's key and certificate chain, PKCS#12 (see `tls`)."""
        return self.root / "kafka-keystore.p12"

    @property
    def kafka_key_password(self) -> Path:
        """The keystore's password (and its key's)."""
        return self.root / "kafka-keystore-password"

    @property
    def metrics_cert(self) -> Path:
        return self.root / "metrics-cert.pem"

    @property
    def metrics_key(self) -> Path:
        return self.root / "metrics-key.pem"

    @property
    def metrics_password(self) -> Path:
        """The basic-auth password of the metrics endpoints (user `METRICS_USER`)."""
        return self.root / "metrics-password"

    @property
    def kafka_server_properties(self) -> Path:
        """Compose only: the broker's configuration (it holds the admin's password)."""
        return self.root / "kafka-server.properties"

    @property
    def kafka_admin_client(self) -> Path:
        """Compose only: Kafka's own tools log in as the admin with it (the health check)."""
        return self.root / "kafka-admin-client.properties"

    @property
    def control_key(self) -> Path:
        return self.root / "control.key"

    def password_file(self, user: str) -> Path:
        return self.root / f"{user}-password"

    def password(self, user: str) -> str:
        return self.password_file(user).read_text().strip()

    def client(self, user: str) -> KafkaSecurity:
        """How `user` connects to the secured broker."""
        return KafkaSecurity("SASL_SSL", MECHANISM, user, self.password(user), str(self.ca))

    def client_env(self, user: str) -> dict[str, str]:
        """The STREAMCTL_KAFKA_* variables of a process running as `user` (password by file)."""
        return {ENV_NAMES["protocol"]: "SASL_SSL", ENV_NAMES["sasl_mechanism"]: MECHANISM,
                ENV_NAMES["username"]: user, PASSWORD_FILE_ENV: str(self.password_file(user)),
                ENV_NAMES["ssl_ca_file"]: str(self.ca)}


def write_secure_files(root: Path, kafka_hosts: Sequence[str] = LOCAL_HOSTS,
                       metrics_hosts: Sequence[str] = LOCAL_HOSTS,
                       file_mode: int = 0o600) -> SecureFiles:
    """Create whatever of the layout is missing under `root` (mode 0700) and return it.

    `file_mode` 0600 keeps the local files private; compose needs 0644, since its containers
    run as other users (the directory's 0700 still keeps other host users out).
    """
    files = SecureFiles(root)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    for user in USERS:
        _write(files.password_file(user), secrets.token_urlsafe(24), file_mode)
    _write(files.metrics_password, secrets.token_urlsafe(24), file_mode)
    _write(files.kafka_key_password, secrets.token_urlsafe(24), file_mode)
    if not (files.ca.exists() and files.kafka_keystore.exists() and files.metrics_key.exists()):
        _write_certificates(files, kafka_hosts, metrics_hosts, file_mode)
    return files


def write_compose_secrets(root: Path) -> SecureFiles:
    """Everything docker-compose.secure.yml mounts as secrets, generated where missing: the
    layout above for the compose host names, the broker's server.properties and its tools'
    admin login (paths as the containers see them), and the control-tuple key."""
    files = write_secure_files(root, COMPOSE_KAFKA_HOSTS, COMPOSE_METRICS_HOSTS, 0o644)
    inside = SecureFiles(Path(COMPOSE_SECRETS))
    properties = render_secure_properties(
        COMPOSE_LISTENERS, COMPOSE_DATA_DIR,
        SecureBrokerFiles(str(inside.kafka_keystore), files.kafka_key_password.read_text().strip(),
                          str(inside.ca)),
        ADMIN, files.password(ADMIN))
    _write(files.kafka_server_properties, properties, 0o644, replace=True)
    admin = KafkaSecurity("SASL_SSL", MECHANISM, ADMIN, files.password(ADMIN), str(inside.ca))
    tool_config = "".join(f"{k.removeprefix('kafka.')}={v}\n"
                          for k, v in admin.spark_options().items())
    _write(files.kafka_admin_client, tool_config, 0o644, replace=True)
    auth.ensure_key_file(files.control_key)
    return files


def _write_certificates(files: SecureFiles, kafka_hosts: Sequence[str],
                        metrics_hosts: Sequence[str], mode: int) -> None:
    """A new CA signs both server certificates; its key is not kept (nothing else is ever
    signed with it: to add a host, delete the certificates and generate again)."""
    authority = tls.new_authority()
    kafka = tls.issue_server(authority, kafka_hosts)
    metrics = tls.issue_server(authority, metrics_hosts)
    keystore_password = files.kafka_key_password.read_text().strip()
    _write(files.kafka_keystore, kafka.pkcs12(keystore_password, [authority.certificate]),
           mode, replace=True)
    _write(files.metrics_cert, metrics.certificate_pem + authority.certificate_pem, mode,
           replace=True)
    _write(files.metrics_key, metrics.key_pem, mode, replace=True)
    _write(files.ca, authority.certificate_pem, mode, replace=True)


def _write(path: Path, content: str | bytes, mode: int, replace: bool = False) -> None:
    """Write `content` to `path` created with `mode` (never briefly readable by others)."""
    if path.exists() and not replace:
        return
    data = content.encode() + b"\n" if isinstance(content, str) else content
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(temporary, mode)  # the umask may have narrowed it
    temporary.replace(path)
