"""docker-compose.yml in containers: the project image on a compose network, for real.

In order, on one stack (conftest `compose_stack`): the image's user and volumes; topic init
and every client reaching the broker by its service name; Prometheus scraping every target;
a load step the controller meets by scaling the job on the containerised Spark cluster;
`docker compose restart` of the job; a crash (SIGKILL from the host) of the active job with
the standby up, which fails over and which compose's restart policy answers.
Every record produced, through all of it, is checked last, once, in the job's output as a
`read_committed` reader sees it (the check closes the event-time windows, after which no
later record could be counted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from bench.compose.stack import BOOTSTRAP, INPUT, QUERY, SERVICE_OF, Compose, master_state
from schemas import TaskMetrics
from schemas.records import Role
from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.profiles import RateProfile
from streamctl.stack.defaults import DEFAULT_TOPICS
from streamctl.stack.kafka_admin import admin_client
from streamctl.tail import Tail
from tests.accounting import assert_every_record_accounted_for, flush_last_windows
from tests.containers.conftest import Timings
from tests.e2e.loop import capacity
from tests.support.bed import Watch
from tests.support.prometheus import api
from tests.support.waiting import until

pytestmark = [pytest.mark.containers, pytest.mark.timeout(1800)]

OUTPUT = "sensor-averages"
BATCH_CAP = 4000  # the job's default max_offsets_per_trigger (docker-compose.yml sets none)
TOPICS = {"input": INPUT, "metrics": "streamctl.metrics", "acks": "streamctl.acks",
          "decisions": "streamctl.decisions"}
WINDOW_MS = 10_000


@pytest.fixture(scope="module")
def ledger() -> Ledger:
    """Every record the module produces, for the last test's accounting."""
    return Ledger(WINDOW_MS)


@pytest.fixture(scope="module")
def watch(compose_stack: Compose) -> Iterator[Watch]:
    w = Watch(BOOTSTRAP, TOPICS, QUERY, [])
    yield w
    w.close()


@pytest.fixture(scope="module")
def measured(compose_stack: Compose, watch: Watch, ledger: Ledger) -> float:
    """The job's records/s at its starting size: a burst of four full batches."""
    burst = LoadSpec(BOOTSTRAP, INPUT, RateProfile("constant", 8000), 4 * BATCH_CAP / 8000,
                     start_seq=10**9)
    run_load(burst, ledger)
    watch.until(lambda: bool(watch.view.samples) and watch.lag_records() == 0, 300,
                "the calibration burst worked through")
    return capacity(watch.view.samples, BATCH_CAP)


def _exec(compose: Compose, service: str, command: str) -> str:
    return compose("exec", "-T", service, "sh", "-c", command).stdout.strip()


def test_the_project_image_runs_unprivileged_and_writes_its_volumes(
        compose_stack: Compose, measured: float) -> None:
    for service in ("job", "job-standby", "controller", "controller-2", "spark-worker"):
        assert _exec(compose_stack, service, "id -u") != "0", service
    # The job's checkpoint is on the shared volume, written by the job's user.
    listing = _exec(compose_stack, "job", "ls /var/lib/streamctl/checkpoints/sensor-averages")
    assert "offsets" in listing.split(), listing
    owner = _exec(compose_stack, "job",
                  "stat -c %u /var/lib/streamctl/checkpoints/sensor-averages")
    assert owner == _exec(compose_stack, "job", "id -u")
    assert _exec(compose_stack, "spark-worker",
                 "touch /var/lib/streamctl/spark-work/probe && echo ok") == "ok"


def test_topic_init_reached_the_broker_by_its_service_name_and_made_every_topic(
        compose_stack: Compose) -> None:
    assert compose_stack.state("topics") == ["exited 0"]
    listed = admin_client(BOOTSTRAP).list_topics(timeout=30).topics
    assert {spec.name for spec in DEFAULT_TOPICS} <= set(listed)


def test_the_driver_runs_its_executors_on_the_workers(compose_stack: Compose,
                                                      measured: float) -> None:
    """Both workers registered; the active's driver holds its two executors there (the burst's
    batches ran on them) and the standby's only the one it keeps warm."""
    master = master_state()
    assert master is not None, "the Spark master does not answer"
    assert master["aliveworkers"] == 2, master
    assert sorted(app["cores"] for app in master["activeapps"]) == [1, 2], master["activeapps"]
    assert measured > 0


def test_prometheus_scrapes_every_target_up(compose_stack: Compose) -> None:
    def all_up() -> list[dict[str, Any]] | None:
        targets = api("http://127.0.0.1:9090", "/api/v1/targets")["data"]["activeTargets"]
        down = [t for t in targets if t["health"] != "up"]
        return targets if targets and not down else None

    targets = until(all_up, 120, "every Prometheus target up", 2)
    jobs = sorted((t["labels"]["job"], t["labels"]["instance"]) for t in targets)
    assert [j for j, _ in jobs].count("spark-worker") == 2, jobs
    assert ("streamctl-job", "job-standby:9301") in jobs, jobs


def test_the_two_controller_instances_divide_the_four_shards_of_the_queries(
        compose_stack: Compose) -> None:
    """The topics service made the lease topic with four partitions; each instance leads
    some of them, and together all four."""
    def divided() -> list[float] | None:
        result = api("http://127.0.0.1:9090", "/api/v1/query",
                     query="streamctl_controller_shards_led")["data"]["result"]
        led = sorted(float(r["value"][1]) for r in result)
        return led if len(led) == 2 and led[0] > 0 and sum(led) == 4 else None

    until(divided, 120, "both controller instances leading shards, four in all", 2)


def test_a_load_step_is_met_by_the_controller_scaling_the_job_on_the_cluster(
        compose_stack: Compose, watch: Watch, ledger: Ledger, measured: float,
        timings: Timings) -> None:
    steady_s, after_s = 10.0, 50.0
    profile = RateProfile("step", 0.4 * measured, 3 * measured, start_s=steady_s)
    load = threading.Thread(target=run_load, args=(
        LoadSpec(BOOTSTRAP, INPUT, profile, duration_s=steady_s + after_s), ledger))
    step_at = time.monotonic() + steady_s
    load.start()
    try:
        watch.until(lambda: bool(watch.applied()), steady_s + 240, "an applied control tuple")
        timings.figures["load step → scaled (tuple applied)"] = time.monotonic() - step_at
    finally:
        load.join(steady_s + after_s + 60)
    assert ledger.failed == 0
    [first, *_] = watch.sent()
    assert first.action == "scale_up", [(d.action, d.parameter, d.target_value)
                                        for d in watch.sent()]
    watch.until(lambda: watch.lag_records() == 0, 300, "the backlog to drain")
    last = _last_active(watch)
    assert last.input_parallelism > 2 or last.task_slots > 2, last


def test_compose_restart_of_the_job_keeps_the_query_going(
        compose_stack: Compose, watch: Watch, ledger: Ledger, measured: float) -> None:
    """After `docker compose restart job` batches are committed again and the backlog drains:
    by the restarted job from its checkpoint, or, when the restart kept it silent beyond the
    controller's failover timeout (25 s), by the standby it promoted."""
    with _load(ledger, 0.3 * measured, start_seq=2 * 10**9):
        before = _last_active(watch).batch_id
        compose_stack("restart", "job", timeout_s=180)
        watch.until(lambda: _last_active(watch).batch_id > before + 2, 300,
                    "batches committed after the restart")
    watch.until(lambda: watch.lag_records() == 0, 300, "the query to catch up")


def test_a_crashed_active_is_failed_over_and_restarted_by_compose_as_the_standby(
        compose_stack: Compose, watch: Watch, ledger: Ledger, measured: float,
        timings: Timings) -> None:
    """The active job's process is killed (SIGKILL from the host: a crash, which compose's
    `restart: on-failure` answers, where `docker kill` would count as a stop asked for): the
    controller promotes the live standby once the active's beats stop, the promoted instance
    commits batches and catches up, and compose starts the crashed container again, whose
    instance comes back as the standby."""
    active = _last_active(watch).instance_id
    standby = _await_standby_heartbeat(other_than=active)
    container = compose_stack.container(SERVICE_OF[active])
    restarts = compose_stack.restart_count(container)
    with _load(ledger, 0.3 * measured, start_seq=3 * 10**9):
        compose_stack.crash(container)
        killed = time.monotonic()
        watch.until(lambda: _last_active(watch).instance_id == standby, 300,
                    "batches committed by the promoted standby")
        timings.figures["crash → promoted standby's batch"] = time.monotonic() - killed
    watch.until(lambda: watch.lag_records() == 0, 300, "the promoted standby to catch up")
    promotions = [d for d in watch.sent() if d.action == "failover"
                  and d.target_value == standby]
    assert promotions, [(d.action, d.target_value) for d in watch.sent()]
    until(lambda: compose_stack.restart_count(container) > restarts, 120,
          "compose to start the crashed container again")
    assert _await_standby_heartbeat(other_than=standby) == active
    timings.figures["crash → the crashed instance back as the standby"] = (
        time.monotonic() - killed)


def _await_standby_heartbeat(other_than: str) -> str:
    """The instance id of a live standby (a heartbeat within the next 60 s)."""
    tail = Tail(BOOTSTRAP, {TOPICS["metrics"]: TaskMetrics})
    try:
        def heartbeat() -> str | None:
            return next((r.instance_id for _t, r in tail.poll(1.0)
                         if isinstance(r, TaskMetrics) and r.role is Role.STANDBY
                         and r.instance_id != other_than), None)
        return until(heartbeat, 60, "a heartbeat of a live standby", 0)
    finally:
        tail.close()


def _last_active(watch: Watch) -> TaskMetrics:
    """The newest batch an active instance committed (the view keeps no standby heartbeat)."""
    return watch.view.samples[-1]


def test_every_record_produced_is_in_the_read_committed_output_exactly_once(
        compose_stack: Compose, ledger: Ledger) -> None:
    assert ledger.failed == 0 and ledger.acked > 0
    flush_last_windows(BOOTSTRAP, INPUT)
    assert_every_record_accounted_for(BOOTSTRAP, OUTPUT, ledger, timeout_s=300)


@contextmanager
def _load(ledger: Ledger, rate: float, start_seq: int) -> Iterator[None]:
    """Constant load in the background for a `with` block, acknowledged into `ledger`."""
    stop = threading.Event()
    spec = LoadSpec(BOOTSTRAP, INPUT, RateProfile("constant", rate), 3600, start_seq=start_seq)
    thread = threading.Thread(target=run_load, args=(spec, ledger, stop))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def test_the_load_service_produces_to_the_broker_by_its_service_name(
        compose_stack: Compose) -> None:
    """The compose file's own `load` service (profile `load`): its records reach the input.
    Last, since the accounting above knows only the records the check produced itself."""
    def input_end() -> int:
        tail = Tail(BOOTSTRAP, {INPUT: TaskMetrics})
        try:
            return tail.log_end_total(INPUT)
        finally:
            tail.close()

    before = input_end()
    compose_stack("--profile", "load", "up", "-d", "--no-build", "load", timeout_s=120)
    try:
        until(lambda: input_end() >= before + 300, 120, "the load service's records", 2)
    finally:
        compose_stack("--profile", "load", "stop", "load", timeout_s=60)
    assert compose_stack.state("load")[0].startswith("exited"), compose_stack.state("load")
