"""docker-compose.secure.yml (applied over docker-compose.yml) and deploy/prometheus.secure.yml,
cross-checked with the code: the variables, the secrets `streamctl stack secrets` generates, the
principals of the ACL set, the broker configuration and the scrape settings.

Unit tier: no broker, no Docker. `test_compose_secure_local.py` runs the services.
"""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest

from streamctl.stack import acls, secure
from tests.deploy import deployment as d

MERGED = d.secure_compose()
SERVICES = MERGED["services"]
OVERRIDDEN = d.load_yaml(d.SECURE_COMPOSE_FILE)["services"]
PROJECT = {name: s for name, s in SERVICES.items()
           if d.is_project_service(s) and d.process_kind(s) is not None}
PRINCIPAL = {"job": secure.JOB, "controller": secure.CONTROLLER, "load": secure.LOAD,
             "topics": secure.ADMIN}
"""Who each kind of process logs in as."""


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `streamctl stack secrets --dir` writes (for the /run/secrets mapping)."""
    root = tmp_path_factory.mktemp("secure") / "secrets"
    secure.write_compose_secrets(root)
    return root


def test_every_project_client_service_is_secured() -> None:
    assert set(PROJECT) <= set(OVERRIDDEN), \
        f"services left on PLAINTEXT: {set(PROJECT) - set(OVERRIDDEN)}"
    for name, service in PROJECT.items():
        env = d.environment(service)
        assert env["STREAMCTL_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL", name
        assert env["STREAMCTL_KAFKA_SASL_USERNAME"] == PRINCIPAL[d.process_kind(service) or ""]


@pytest.mark.parametrize("name", sorted(PROJECT))
def test_every_streamctl_variable_is_read_by_its_process(name: str) -> None:
    kind = d.process_kind(PROJECT[name]) or ""
    unread = {k for k in d.environment(PROJECT[name]) if k.startswith("STREAMCTL_")} \
        - d.env_read_by(kind)
    assert not unread, f"{name} ({kind}) sets variables its process never reads: {unread}"


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_every_file_is_a_mounted_secret_that_stack_secrets_generates(
        name: str, secrets_dir: Path) -> None:
    service = SERVICES[name]
    mounts = d.secret_mounts(service)
    for key, value in d.environment(service).items():
        if key.endswith("_FILE"):
            assert value in mounts, f"{name}: {key}={value} is not a secret it mounts"
    for secret in service.get("secrets", []):
        declared = MERGED["secrets"].get(secret)
        assert declared, f"{name} mounts the undeclared secret {secret}"
        generated = secrets_dir / Path(declared["file"]).name
        assert generated.is_file(), f"`stack secrets` does not write {declared['file']}"
        assert Path(declared["file"]).parent == Path("deploy/secrets")


@pytest.mark.parametrize("name", sorted(n for n, s in PROJECT.items()
                                        if d.process_kind(s) in ("job", "controller")))
def test_compose_environment_builds_a_secured_configuration(name: str, secrets_dir: Path) -> None:
    env = d.LocalMapping({}, {}, d.local_secrets(MERGED, secrets_dir)).environment(SERVICES[name])
    files = secure.SecureFiles(secrets_dir)
    config: Any
    if d.process_kind(SERVICES[name]) == "job":
        from streaming_jobs.config import JobConfig
        from streaming_jobs.loading import load

        config = JobConfig.from_sources(load(env["STREAMCTL_JOB"]), env=env)
        kafka, endpoint = config.security.kafka_security, config.security.endpoint_security
    else:
        from controller.cli import settings_from

        config = settings_from(Namespace(), env)
        kafka, endpoint = config.kafka.security, config.metrics_endpoint
    assert kafka == files.client(PRINCIPAL[d.process_kind(SERVICES[name]) or ""])
    assert endpoint.scheme == "https"
    assert endpoint.basic_auth_password == files.metrics_password.read_text().strip()


def test_the_users_are_the_principals_the_acl_set_grants() -> None:
    granted = {g.user for g in acls.streamctl_acls()}
    assert granted == set(secure.USERS) - {secure.ADMIN}
    assert {PRINCIPAL[d.process_kind(s) or ""] for s in PROJECT.values()} == set(secure.USERS)
    only_writer = {g.user for g in acls.streamctl_acls()
                   if g.name == acls.Names().control and "WRITE" in g.operations}
    assert only_writer == {secure.CONTROLLER}


def test_the_init_service_applies_the_acl_set_with_every_users_password() -> None:
    topics = SERVICES["topics"]
    command = topics["command"]
    assert command[:3] == ["streamctl", "stack", "topics"]
    secure_dir = command[command.index("--secure-dir") + 1]
    mounted = {f"{secure_dir}/{s}" for s in topics["secrets"]}
    files = secure.SecureFiles(Path(secure_dir))
    assert {str(files.password_file(u)) for u in secure.USERS} <= mounted


def _properties(path: Path) -> dict[str, str]:
    lines = (line.split("=", 1) for line in path.read_text().splitlines()
             if "=" in line and not line.startswith("#"))
    return {k: v for k, v in lines}


def test_the_broker_config_agrees_with_the_compose_listeners_and_secrets(
        secrets_dir: Path) -> None:
    kafka = SERVICES["kafka"]
    props = _properties(secure.SecureFiles(secrets_dir).kafka_server_properties)
    base = d.environment(kafka)
    assert props["advertised.listeners"] == base["KAFKA_ADVERTISED_LISTENERS"]
    assert props["controller.quorum.voters"] == base["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert props["log.dirs"] == base["KAFKA_LOG_DIRS"]
    protocols = dict(item.split(":") for item in props["listener.security.protocol.map"].split(","))
    assert set(protocols.values()) == {"SASL_SSL"}, "a listener without TLS and SASL"
    assert props["super.users"] == f"User:{secure.ADMIN}"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    mounted = set(d.secret_mounts(kafka))
    script = " ".join(kafka["command"])
    for path in (props["ssl.keystore.location"], props["ssl.truststore.location"],
                 "/run/secrets/kafka-server.properties", "/run/secrets/admin-password"):
        assert path in mounted, f"the broker needs {path}, which it does not mount"
    assert "/run/secrets/kafka-server.properties" in script and "--add-scram" in script
    assert f"name={secure.ADMIN}," in script and secure.MECHANISM in script
    assert "--command-config /run/secrets/kafka-admin-client.properties" in \
        " ".join(kafka["healthcheck"]["test"])


def test_the_clients_trust_the_ca_that_signed_the_broker(secrets_dir: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import pkcs12

    files = secure.SecureFiles(secrets_dir)
    _key, cert, _chain = pkcs12.load_key_and_certificates(
        files.kafka_keystore.read_bytes(), files.kafka_key_password.read_text().strip().encode())
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    assert cert is not None and cert.issuer == ca.subject
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    advertised = d.environment(SERVICES["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
    for listener in advertised.split(","):
        host = listener.split("://")[1].rsplit(":", 1)[0]
        assert host in names.get_values_for_type(x509.DNSName), f"{host} not in the certificate"


def test_secure_prometheus_scrapes_the_project_over_https_with_basic_auth() -> None:
    plain, secured = d.load_yaml(d.PROMETHEUS_FILE), d.load_yaml(d.SECURE_PROMETHEUS_FILE)
    assert d.scrape_targets(plain) == d.scrape_targets(secured)
    mounted = d.secret_mounts(SERVICES["prometheus"])
    assert "./deploy/prometheus.secure.yml:/etc/prometheus/prometheus.yml:ro" in \
        SERVICES["prometheus"]["volumes"]
    for job in secured["scrape_configs"]:
        if not job["job_name"].startswith("streamctl-"):
            assert "basic_auth" not in job and job.get("scheme", "http") == "http"
            continue
        assert job["scheme"] == "https"
        assert job["tls_config"]["ca_file"] in mounted
        assert job["basic_auth"]["password_file"] in mounted
        for target in job["static_configs"][0]["targets"]:
            env = d.environment(SERVICES[target.split(":")[0]])
            assert job["basic_auth"]["username"] == env["STREAMCTL_METRICS_BASIC_AUTH_USERNAME"]
            assert env["STREAMCTL_METRICS_BASIC_AUTH_PASSWORD_FILE"] == \
                job["basic_auth"]["password_file"]


def test_the_principals_client_settings_are_valid(secrets_dir: Path) -> None:
    """Each principal's generated settings pass KafkaSecurity's validation, which raises
    naming the variable at fault, and carry that principal's name and password."""
    files = secure.SecureFiles(secrets_dir)
    for user in secure.USERS:
        client = files.client(user)
        assert (client.username, client.password) == (user, files.password(user))


def test_the_acl_set_names_the_bundled_jobs_queries_and_topics() -> None:
    from streaming_jobs.loading import bundled, load

    names = acls.Names()
    jobs = [load(name) for name in bundled()]
    assert set(names.query_ids) == {j.name for j in jobs}
    assert set(names.inputs) == {j.topics.input for j in jobs}
    assert set(names.outputs) == {j.topics.output for j in jobs}
    assert set(names.dead_letters) == {j.topics.resolved_dead_letters() for j in jobs}
