"""The secured stack working, and refusing: docker-compose.secure.yml's services run locally
against the secured local broker (SASL_SSL with SCRAM, a throwaway CA, ACLs).

End-to-end tier, no Docker. The secrets are what `streamctl stack secrets` writes for compose;
the local broker (`LocalBroker(secure=True)`) serves with them, so `/run/secrets/<name>` maps
to that directory. The compose `topics` service creates the SCRAM users and the ACLs (after the
broker's own grants are wiped, so they are the init service's alone); the `controller` and the
`job` run with their compose command and environment (their metrics on HTTPS with basic auth)
and a small load runs as the load principal. The job's metrics reach the controller; a signed
tuple sent through the controller's Kafka adapters as its principal is applied by the job and
acked, all over SASL_SSL. Then: wrong passwords, clients without TLS and non-controller
principals writing the control topic are refused; scrapes without the credentials are refused;
a real Prometheus scrapes the endpoints with deploy/prometheus.secure.yml. Needs `prometheus`
and `promtool` (`./dev setup`).
"""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramMechanism,
    UserScramCredentialDeletion,
)

from controller.errors import TemporaryError
from controller.kafka.clients import KafkaAckSource, KafkaControlSink, KafkaWriter
from controller.loop.ports import DeliveryError
from controller.settings import KafkaSettings
from schemas import Ack, ControlTuple, Outcome, auth
from streamctl.processes import Child, stop_all
from streamctl.security.kafka import KafkaSecurity, client_config
from streamctl.stack import acls, secure
from streamctl.stack.broker import LocalBroker
from streamctl.stack.defaults import CONTROL_TOPIC, default_state_dir
from streamctl.stack.kafka_admin import admin_client
from streamctl.stack.tcp import find_free_ports
from tests.deploy import acl_view
from tests.deploy import deployment as d
from tests.support.class_archive import broker_env
from tests.support.prometheus import api, check_metrics, running, sample
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(600)]

QUERY = "sensor-averages"
STARTUP_BUDGET_S = 300.0  # the secured broker, then Spark's first batch on 2 busy cores
MERGED = d.secure_compose()
SERVICES = MERGED["services"]
CLUSTER_VARIABLES = frozenset({"STREAMCTL_SPARK_MASTER", "STREAMCTL_SPARK_DRIVER_HOST",
                               "STREAMCTL_EXECUTORS", "STREAMCTL_EXECUTOR_CORES",
                               "STREAMCTL_EXECUTOR_MEMORY_MB"})
TEST_WRITER_GROUP = "streamctl-controller.acl-test"
"""The test writes as the controller's principal under an id of its own (within the
controller's prefix grant): the running controller's id would fence the running controller."""
LOAD_PER_S = 10


@dataclass
class SecureStack:
    broker: LocalBroker
    files: secure.SecureFiles
    mapping: d.LocalMapping
    endpoints: dict[str, str]
    children: list[Child]
    granted: dict[str, set[tuple[str, str, str, str, bool]]]
    """The ACLs the secured local broker created at start, and those the init service did."""
    tmp: Path

    def scrape(self, service: str, password: str | None = None) -> tuple[int, str]:
        """(HTTP status, body) of an HTTPS scrape trusting the stack's CA."""
        request = urllib.request.Request(self.endpoints[service])
        if password is not None:
            token = base64.b64encode(f"{secure.METRICS_USER}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        context = ssl.create_default_context(cafile=str(self.files.ca))
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def metrics(self, service: str) -> str:
        status, body = self.scrape(service, self.files.metrics_password.read_text().strip())
        return body if status == 200 else ""


def _wipe_grants(admin: AdminClient) -> None:
    """Remove what the broker granted at start, so the init service must create it all."""
    for future in admin.delete_acls([acl_view.EVERY_BINDING], request_timeout=30).values():
        future.result(timeout=30)
    users = [u for u in secure.USERS if u != secure.ADMIN]
    deletions = [UserScramCredentialDeletion(u, ScramMechanism.SCRAM_SHA_512) for u in users]
    for future in admin.alter_user_scram_credentials(deletions).values():  # type: ignore[arg-type]
        future.result(timeout=30)
    assert acl_view.granted(admin) == set()


def _run_topics_service(mapping: d.LocalMapping, bootstrap: str, secrets: Path) -> None:
    """The command's --secure-dir is the containers' /run/secrets: here, the secrets' directory
    (every secret there is named as its file, test_compose_secure_static checks)."""
    command = [str(secrets) if arg == secure.COMPOSE_SECRETS else arg
               for arg in SERVICES["topics"]["command"][1:]]
    topics = subprocess.run(
        [sys.executable, "-m", "streamctl", *command], cwd=d.ROOT,
        env={**d.outside_environment(), **mapping.environment(SERVICES["topics"]),
             "STREAMCTL_BOOTSTRAP_SERVERS": bootstrap},
        capture_output=True, text=True, timeout=120)
    assert topics.returncode == 0, f"topic init failed:\n{topics.stdout}{topics.stderr}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    tmp = tmp_path_factory.mktemp("compose-secure")
    files = secure.write_compose_secrets(tmp / "state" / "secure")
    port, controller_port, job_port, metrics_port = find_free_ports(4)
    broker = LocalBroker(tmp / "state", port, controller_port, secure=True,
                         maven_dir=default_state_dir() / "maven", env=broker_env())
    broker.start(timeout_s=180.0)
    children: list[Child] = []
    try:
        admin = admin_client(broker.bootstrap_servers, broker.client_security())
        wanted = acl_view.expected(acls.streamctl_acls())
        # The broker's view of the metadata follows the controller's a moment later.
        until(lambda: acl_view.granted(admin) == wanted, 30.0, "the broker's own grants", 0.5)
        granted_by_broker = acl_view.granted(admin)
        _wipe_grants(admin)
        mapping = d.LocalMapping(
            addresses={"kafka:19092": broker.bootstrap_servers},
            ports={9301: job_port, 9300: metrics_port},
            paths={**d.local_secrets(MERGED, files.root), "/var/lib/streamctl/": f"{tmp}/var/"})
        _run_topics_service(mapping, broker.bootstrap_servers, files.root)
        until(lambda: acl_view.granted(admin) == wanted, 30.0, "the init service's grants", 0.5)
        granted = acl_view.granted(admin)
        children.append(d.start_service("controller", SERVICES["controller"]["command"],
                               mapping.environment(SERVICES["controller"]),
                               tmp / "logs"))
        # Security is what this module checks: the job runs in local mode here, without the
        # compose Spark cluster (its run on that cluster is test_compose_local's).
        job_env = {k: v for k, v in mapping.environment(SERVICES["job"]).items()
                   if k not in CLUSTER_VARIABLES}
        children.append(d.start_service("job", SERVICES["job"]["command"], job_env, tmp / "logs"))
        load_env = {**mapping.environment(SERVICES["load"]),
                    "STREAMCTL_BOOTSTRAP_SERVERS": broker.bootstrap_servers}
        load = ["streamctl", "produce", "--topic", "sensor-readings", "--profile", "constant",
                "--rate", str(LOAD_PER_S), "--duration-s", "500"]
        children.append(d.start_service("load", load, load_env, tmp / "logs"))
        endpoints = {"controller": f"https://127.0.0.1:{metrics_port}/metrics",
                     "job": f"https://127.0.0.1:{job_port}/metrics"}
        built = SecureStack(broker, files, mapping, endpoints, children,
                            {"broker": granted_by_broker, "init": granted}, tmp)
        until(lambda: sample(built.metrics("controller"),
                             "streamctl_arrival_rate_records_per_second", query=QUERY)
              is not None, STARTUP_BUDGET_S, "the job's metrics in the controller's model", 1.0,
              alive=children)
        yield built
    finally:
        stop_all(children, timeout_s=60.0)
        broker.stop(timeout_s=30.0)


def test_the_local_broker_and_the_init_service_each_grant_exactly_the_acl_set(
        stack: SecureStack) -> None:
    assert stack.granted["broker"] == acl_view.expected(acls.streamctl_acls())
    assert stack.granted["init"] == stack.granted["broker"]


def test_job_and_controller_exchange_metrics_a_control_tuple_and_its_ack(
        stack: SecureStack) -> None:
    """Metrics job → controller process; a signed tuple through the controller's own Kafka
    adapters (`KafkaControlSink`, `KafkaAckSource`, as the controller's principal) → the job
    process, which applies it; its ack back. Every hop is a SASL_SSL client of its principal.

    The controller process decides by itself in tests/e2e; here, on a machine where other
    Spark jobs share 2 cores, its policy sees a 10 records/s job as busy and holds, so the
    test sends the tuple the way the controller's loop does, instead of waiting for a
    decision it cannot force."""
    initial = int(d.environment(SERVICES["job"])["STREAMCTL_INPUT_PARALLELISM"])
    controller = stack.metrics("controller")
    assert (sample(controller, "streamctl_arrival_rate_records_per_second", query=QUERY)
            or 0) > 0
    assert sample(controller, "streamctl_current_parallelism", query=QUERY) == initial
    settings = KafkaSettings(bootstrap_servers=stack.broker.bootstrap_servers,
                             security=stack.files.client(secure.CONTROLLER),
                             group_id=TEST_WRITER_GROUP)
    garbage: list[object] = []
    acks = KafkaAckSource(settings, garbage.append)
    writer = KafkaWriter(settings, 15.0)
    try:
        writer.fence()
        tuple_ = _tuple(QUERY, initial + 1)
        KafkaControlSink(writer, CONTROL_TOPIC, stack.files.control_key.read_text().strip()
                         ).send(tuple_)
        seen: list[Ack] = []

        def acked() -> bool:
            seen.extend(a for a in acks.poll(1.0) if a.control_id == tuple_.control_id)
            return bool(seen)

        until(acked, 240.0, "the job's ack of the control tuple", 0, alive=stack.children)
    finally:
        acks.close()
        writer.close()
    assert seen[0].outcome == Outcome.APPLIED, seen[0]
    assert not garbage
    job = stack.metrics("job")
    applied = [s for f in _families(job) for s in f.samples
               if s.name == "streamctl_job_control_tuples_total"
               and s.labels.get("outcome", "").lower() == "applied"]
    assert applied and applied[0].value >= 1, "the job counted no applied tuple"
    assert sample(job, "streamctl_job_input_parallelism", query=QUERY) == initial + 1
    until(lambda: sample(stack.metrics("controller"), "streamctl_current_parallelism",
                         query=QUERY) == initial + 1,
          120.0, "the controller seeing the new parallelism in the job's metrics", 1.0,
          alive=stack.children)


def _families(text: str) -> list:
    from prometheus_client.parser import text_string_to_metric_families

    return list(text_string_to_metric_families(text))


def _client(stack: SecureStack, security: KafkaSecurity, errors: list[KafkaError]) -> Producer:
    return Producer(client_config(stack.broker.bootstrap_servers, security, **{
        "error_cb": errors.append, "log_level": 0, "socket.timeout.ms": 5000,
        "message.timeout.ms": 10000}))


def test_a_wrong_password_is_refused(stack: SecureStack) -> None:
    job = stack.files.client(secure.JOB)
    wrong = KafkaSecurity(job.protocol, job.sasl_mechanism, job.username, "not-the-password",
                          job.ssl_ca_file)
    errors: list[KafkaError] = []
    client = _client(stack, wrong, errors)

    def authentication_failed() -> bool:
        client.poll(0.2)  # serves the error callbacks
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    # The refusal first: a metadata request that cannot succeed only ends at its timeout.
    until(authentication_failed, 15.0, f"an authentication error (saw {errors})", 0)
    with pytest.raises(KafkaException):
        client.list_topics(timeout=1)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_a_client_without_tls_cannot_talk_to_the_listener(stack: SecureStack,
                                                          protocol: str) -> None:
    """Not even with the right password: the listener speaks TLS only, and hangs up on a
    client that does not."""
    job = stack.files.client(secure.JOB)
    plain = KafkaSecurity(protocol, job.sasl_mechanism,
                          *((job.username, job.password) if protocol.startswith("SASL") else ()))
    errors: list[KafkaError] = []
    client = _client(stack, plain, errors)

    # A metadata request that cannot succeed ends only at its timeout; the listener hangs up
    # at once, which the client reports as a transport failure, not as a slow answer.
    with pytest.raises(KafkaException) as refused:
        client.list_topics(timeout=2)
    assert refused.value.args[0].code() == KafkaError._TRANSPORT, refused.value
    client.poll(0)  # serves the error callbacks
    assert KafkaError._ALL_BROKERS_DOWN in [e.code() for e in errors], errors


def _tuple(query_id: str, parallelism: int = 3) -> ControlTuple:
    return ControlTuple(query_id=query_id, operator_id="source", parameter="input_parallelism",
                        value=str(parallelism), control_id=str(uuid.uuid4()), epoch=1,
                        issuer="streamctl-controller",
                        reason="ACL check", issued_at_ms=int(time.time() * 1000))


@pytest.mark.parametrize("user", [secure.JOB, secure.LOAD])
def test_only_the_controllers_principal_may_write_the_control_topic(stack: SecureStack,
                                                                    user: str) -> None:
    """The controller's own adapter, once as another principal (refused by the broker), once
    as the controller (delivered). The tuple names another query, so the job ignores it."""
    key = stack.files.control_key.read_text().strip()
    refused = KafkaWriter(KafkaSettings(bootstrap_servers=stack.broker.bootstrap_servers,
                                        security=stack.files.client(user),
                                        group_id=TEST_WRITER_GROUP), 10.0)
    with pytest.raises(TemporaryError, match=r"(?i)transactional id authorization"):
        refused.fence()  # the controller's writes are transactional, under its id alone
    with pytest.raises(DeliveryError, match="does not lead"):
        KafkaControlSink(refused, CONTROL_TOPIC, key).send(_tuple("another-query"))
    allowed = KafkaWriter(KafkaSettings(bootstrap_servers=stack.broker.bootstrap_servers,
                                        security=stack.files.client(secure.CONTROLLER),
                                        group_id=TEST_WRITER_GROUP), 10.0)
    try:
        allowed.fence()
        KafkaControlSink(allowed, CONTROL_TOPIC, key).send(_tuple("another-query"))
    finally:
        allowed.close()
    assert len(key.encode()) >= auth.MIN_KEY_BYTES


def test_the_metrics_endpoints_refuse_scrapes_without_the_credentials(stack: SecureStack) -> None:
    password = stack.files.metrics_password.read_text().strip()
    for service in ("controller", "job"):
        assert stack.scrape(service)[0] == 401
        assert stack.scrape(service, "wrong")[0] == 401
        status, body = stack.scrape(service, password)
        assert status == 200 and "streamctl_" in body
        plain_http = stack.endpoints[service].replace("https://", "http://")
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(plain_http, timeout=5).read()
        check_metrics(body, service)


def test_prometheus_scrapes_the_secured_endpoints_with_the_secure_config(
        stack: SecureStack) -> None:
    config = d.local_prometheus_config(stack.mapping, {"controller", "job"},
                                       d.SECURE_PROMETHEUS_FILE)
    path = stack.tmp / "prometheus.secure.yml"
    path.write_text(yaml.safe_dump(config))
    with running(path, stack.tmp) as base:
        def targets() -> list[dict] | None:
            found = api(base, "/api/v1/targets").get("data", {}).get("activeTargets", [])
            return found if found and all(t["health"] == "up" for t in found) else None

        up = until(targets, 60.0, "every secured target up", 1.0)
        assert {t["scrapeUrl"].split("://")[0] for t in up} == {"https"}
        selector = f'streamctl_job_input_rows_total{{query="{QUERY}"}}'
        until(lambda: api(base, "/api/v1/query", query=selector)["data"]["result"], 30.0,
              f"Prometheus to have {selector}", 1.0)


def test_the_controller_sizes_an_idle_job_down_by_a_tuple_of_its_own(stack: SecureStack) -> None:
    """The controller's own decision, signed with its key, written as its principal and
    applied by the job over SASL_SSL (the test above sends one through the controller's
    adapters; this one is decided). The load stops, so the job is idle: no arrivals are below
    low water whatever this machine's speed. The controller is restarted with a scale-down
    stabilisation of 10 s instead of the default 120 s, so the module does not wait two
    minutes for it, and a cooldown of 5 s: it reads the scale-up above back from the
    decisions and would otherwise hold for the rest of the default 30 s."""
    for name in ("load", "controller"):
        child = next(c for c in stack.children if c.name == name)
        child.stop()
        stack.children.remove(child)
    before = sample(stack.metrics("job"), "streamctl_job_input_parallelism", query=QUERY)
    assert before is not None and before > 1, before  # the test above raised it

    def applied() -> float:
        return sample(stack.metrics("job"), "streamctl_job_control_tuples_total", query=QUERY,
                      outcome="APPLIED") or 0
    applied_before = applied()
    env = {**stack.mapping.environment(SERVICES["controller"]),
           "STREAMCTL_CONTROLLER_SCALE_DOWN_STABILISATION_S": "10",
           "STREAMCTL_CONTROLLER_COOLDOWN_S": "5"}
    stack.children.append(d.start_service("controller-restarted",
                                          SERVICES["controller"]["command"], env,
                                          stack.tmp / "logs"))

    def smaller() -> float | None:
        now = sample(stack.metrics("job"), "streamctl_job_input_parallelism", query=QUERY)
        return now if now is not None and now < before else None

    until(smaller, 240.0, "the controller sizing the idle job down", 1.0, alive=stack.children)
    decided = sample(stack.metrics("controller"), "streamctl_decisions_total",
                     action="scale_down", query=QUERY)
    assert decided is not None and decided >= 1, "the scale-down was not the controller's"
    # The new size shows in the job's next heartbeat; its ack once the restarted query is
    # seen idle, a moment later.
    until(lambda: applied() > applied_before, 60.0,
          "the job counting the controller's tuple applied", 1.0, alive=stack.children)
