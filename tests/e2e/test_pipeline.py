"""A pipeline of the user's own jobs under one controller, end to end on real processes.

The example package (`examples/clickstream`, installed like a user's package) runs as three
`job run` processes chained through topics — click-enrich (JSON in) → click-sessions
(stateful, Avro in) → click-alerts (JSON in, plain Avro out) — with one controller. The test
measures the middle and last jobs' capacity first (a burst through the pipeline before the
controller starts), runs a steady load at a third of the smaller, then steps the load to twice
the middle job's capacity and at least STEP_OVER_LAST × the last job's. The last job's check
costs half the middle job's model call, so at its size it keeps up with all the middle job can
send now: only the middle job's resizing makes it need more, which the controller must
foresee. It must size the middle job and the one after it, the last one for what the middle
one will pass on only where its own estimate bears it (a per-batch cost told apart from its
records), else once its own backlog is the evidence; both acks must say applied, and a
`read_committed` reader must find every click exactly once in the last topic.
Garbage on the JSON job's and on the Avro job's input goes to their dead-letter topics, with
the reason in words. The three jobs are started as the guide starts them (no metrics port
given): each serves its own metrics endpoint.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas import Decision, single_object
from streamctl.clicks import ClickLedger
from streamctl.loadgen import LoadSpec, run_load
from streamctl.processes import Child
from streamctl.profiles import RateProfile
from streaming_jobs.api import Avro
from tests.e2e.loop import NOT_SHEDDABLE, capacity, run_jobs, start_controller
from tests.support.bed import Watch
from tests.support.kafka import NewTopics, produce, read_committed
from tests.support.prometheus import sample, scrape

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(720)]

ENRICH, SESSIONS, ALERTS = "click-enrich", "click-sessions", "click-alerts"
BATCH_CAP = 1000
"""Records a batch of each job reads at most: a full batch of the middle job takes ~7 s at its
two units, so the calibration's two full batches through the pipeline take ~20 s (35 s at
2 000)."""
COST_MS = 10
"""Per click, the middle job's model call: 100 clicks/s per unit, so two units carry ~150/s
once Spark's per-batch overhead is paid. The last job's abuse check costs half: with the same
cost, the last job ran at ~85 % of its capacity on what the middle one sent flat out, and was
sometimes resized for its own backlog a round before the middle job."""
STEP_OVER_LAST = 1.5
"""The step's floor against the last job's measured capacity. Twice the middle job's alone
put the last job at 85–100 % of its capacity once the middle one was resized: within the
policy's band (high water 90 %) or just over it, a call the controller may rightly make either
way. The controller's model of a job is its own (fitted on
the batches it saw, up to ~1.3× off the full-batch rate measured here, either way), so the
step is well above the measured capacity: the last job needs more on any such model."""
STEADY_S = 15.0
LOAD_MAX_S = 240.0
"""A cap on the load: it stops once both jobs applied their tuples (the change under load)."""


@pytest.fixture
def topics(new_topics: NewTopics) -> dict[str, str]:
    made = new_topics(clicks=2, enriched=2, sessionized=2, verdicts=2, clicks_dlq=1,
                      enriched_dlq=1, sessionized_dlq=1, metrics=1, control=1, acks=1,
                      decisions=1, lease=1)
    return {name.replace("_dlq", ".dlq"): topic for name, topic in made.items()}


def job(name: str, source: str, sink: str, topics: dict[str, str], workdir: Path,
        *extra: str) -> list[str]:
    return ["--job", name, "--input-topic", topics[source], "--output-topic", topics[sink],
            "--dlq-topic", topics[f"{source}.dlq"], "--checkpoint-dir", str(workdir / name),
            "--trigger-interval-s", "1", "--max-offsets-per-trigger", str(BATCH_CAP),
            *NOT_SHEDDABLE, *extra]


@pytest.fixture
def pipeline(bootstrap_servers: str, topics: dict[str, str],
             tmp_path: Path) -> Iterator[list[Child]]:
    """The three jobs; the test starts the controller once it has measured them."""
    jobs = {
        ENRICH: job(ENRICH, "clicks", "enriched", topics, tmp_path, "--input-parallelism", "2",
                    "--set", "lookup_cost_ms=0.1"),
        SESSIONS: job(SESSIONS, "enriched", "sessionized", topics, tmp_path,
                      "--state-partitions", "2", "--max-state-partitions", "16",
                      "--set", f"model_cost_ms={COST_MS}", "--set", "watermark_s=600"),
        ALERTS: job(ALERTS, "sessionized", "verdicts", topics, tmp_path,
                    "--input-parallelism", "2", "--set", f"check_cost_ms={COST_MS / 2}"),
    }
    with run_jobs(bootstrap_servers, topics, jobs, tmp_path, with_controller=False,
                  metrics_endpoints=True) as children:
        yield children


def clicks(bootstrap: str, topic: str, ledger: ClickLedger, profile: RateProfile,
           duration_s: float, run: int, stop: threading.Event | None = None) -> None:
    """Produce JSON clicks (until `stop`, if given); `run` keeps event ids apart between
    calls."""
    spec = LoadSpec(bootstrap, topic, profile, duration_s, event_type="click", users=300,
                    start_seq=run)
    run_load(spec, ledger, stop)
    assert ledger.failed == 0


def burst(bootstrap: str, topic: str, ledger: ClickLedger, count: int, run: int) -> None:
    clicks(bootstrap, topic, ledger, RateProfile("constant", 4000, 4000, 0), count / 4000, run)


def test_a_load_step_resizes_the_middle_job_and_the_next_on_evidence_and_loses_nothing(
        bootstrap_servers: str, topics: dict[str, str], pipeline: list[Child],
        tmp_path: Path) -> None:
    t = topics
    inputs = {ENRICH: t["clicks"], SESSIONS: t["enriched"], ALERTS: t["sessionized"]}
    watch = Watch(bootstrap_servers, t, (ENRICH, SESSIONS, ALERTS), pipeline)
    ledger = ClickLedger()
    garbage(bootstrap_servers, t["clicks"], t["enriched"])

    burst(bootstrap_servers, t["clicks"], ledger, 100, run=1)  # every job's first batch
    watch.until(lambda: all(any(m.input_rows for m in v.samples)
                            for v in watch.views.values()), 300, "every job's first batch")
    burst(bootstrap_servers, t["clicks"], ledger, 2 * BATCH_CAP, run=2)  # 2 full batches each
    def drained() -> bool:
        """In pipeline order, so what a job wrote before its check is in the next one's."""
        return all(watch.lag_records(q, inputs[q]) == 0 for q in inputs)

    watch.until(drained, 240, "the calibration burst through the whole pipeline")
    measured = {q: capacity(watch.views[q].samples, BATCH_CAP) for q in (SESSIONS, ALERTS)}
    step_rate = max(2.0 * measured[SESSIONS], STEP_OVER_LAST * measured[ALERTS])
    # From the metrics' end, not read back (the default): the calibration burst is the test's
    # measurement, not load to answer. Read back, its full batches fit the middle job's model
    # closely, round one sizes it (2 -> 5 or 6) on the arrival seen 4-5 s after the step
    # (220-300/s whatever the step), and the last job's foreseen inflow sits at the edge of
    # its band: it was sized a cycle later in three runs of six.
    pipeline.append(start_controller(bootstrap_servers, t, tmp_path, 0,  # stopped by the fixture
                                     "--metrics-offset-reset", "latest"))

    profile = RateProfile("step", 0.3 * min(measured.values()), step_rate, STEADY_S)
    stop_load = threading.Event()
    load = threading.Thread(target=clicks, args=(bootstrap_servers, t["clicks"], ledger, profile,
                                                 LOAD_MAX_S, 3, stop_load))
    step_at = time.monotonic() + STEADY_S
    load.start()
    try:
        watch.until(lambda: bool(watch.sent()), STEADY_S + 150, "a control tuple after the step")
        sent_after_s = time.monotonic() - step_at
        assert sent_after_s > 0, f"a tuple before the step: {_decisions(watch.decisions)}"
        watch.until(lambda: {d.query_id for d in watch.sent()} >= {SESSIONS, ALERTS}, 240,
                    "a control tuple for the middle job and for the last one")
        sessions, alerts = (next(d for d in watch.sent() if d.query_id == q)
                            for q in (SESSIONS, ALERTS))
        context = (f"capacity measured {measured}, step to {step_rate:.0f}/s\n"
                   f"{_decisions(watch.decisions)}\n"
                   f"{_status(tmp_path / 'controller.log', ALERTS)}")
        assert sessions.parameter == "state_partitions" and int(sessions.target_value) > 2
        assert alerts.parameter == "input_parallelism" and int(alerts.target_value) > 2
        # Resized ahead of its own backlog only on a cost told apart (fitted, or remembered
        # from a fit: c > 0); otherwise its own backlog is the evidence.
        f = alerts.figures
        assert (f["overhead_fitted"] == 1 or f["batch_overhead_s"] > 0 or f["backlog"] > 1000
                or f["backlog_trend"] > 50), context
        watch.until(lambda: {a.control_id for a in watch.applied()}
                    >= {sessions.control_id, alerts.control_id}, 240, "both tuples applied")
    finally:
        stop_load.set()
        load.join(60)
    watch.until(drained, 300, "the pipeline to drain after the load")
    recovered_after_s = time.monotonic() - step_at

    verdicts = [_event_id(m.value()) for m in read_committed(bootstrap_servers, t["verdicts"])]
    duplicated = [e for e, n in Counter(verdicts).items() if n > 1]
    assert not duplicated, f"{len(duplicated)} clicks with two verdicts, e.g. {duplicated[:3]}"
    missing = ledger.event_ids - set(verdicts)
    assert not missing, f"{len(missing)} acknowledged clicks without a verdict"
    assert set(verdicts) == ledger.event_ids
    _assert_dead_letters(bootstrap_servers, t)
    _assert_side_by_side_endpoints(watch)
    acks = {a.control_id: a for a in watch.applied()}
    print(f"\ncapacity measured: {measured}; step {profile.base_per_s:.0f} -> {step_rate:.0f}/s; "
          f"first tuples {sent_after_s:.1f} s after the step: "
          f"{SESSIONS} {sessions.current_value}->{sessions.target_value} "
          f"(pause {acks[sessions.control_id].pause_ms} ms), "
          f"{ALERTS} {alerts.current_value}->{alerts.target_value} "
          f"(pause {acks[alerts.control_id].pause_ms} ms); every job drained "
          f"{recovered_after_s:.0f} s after the step; {ledger.acked} clicks, one verdict each")
    watch.close()


def garbage(bootstrap: str, json_topic: str, avro_topic: str) -> None:
    produce(bootstrap, json_topic, [
        b'{"user_id": "u", "page": "/"',  # truncated JSON
        b'{"event_id": "e", "user_id": "u", "page": "/", "ts": "now"}'])
    produce(bootstrap, avro_topic, [single_object.MAGIC + b"\x00" * 8])  # an unknown schema


def _assert_dead_letters(bootstrap: str, t: dict[str, str]) -> None:
    json_letters = read_committed(bootstrap, t["clicks.dlq"])
    avro_letters = read_committed(bootstrap, t["enriched.dlq"])
    errors = sorted(dict(m.headers() or [])["error"].decode() for m in json_letters)
    assert errors == ["field 'ts': expected a long (an integer), got the string \"now\"",
                      "not valid JSON: Expecting ',' delimiter at line 1 column 29"], errors
    [avro] = avro_letters
    headers = dict(avro.headers() or [])
    assert headers["error"].decode().startswith("written with an unknown schema: fingerprint "
                                                "0000000000000000")
    assert (headers["source_topic"].decode(), headers["query_id"].decode()) == (
        t["enriched"], SESSIONS)


def _assert_side_by_side_endpoints(watch: Watch) -> None:
    """Three jobs on one host, each started without `--metrics-port` as the guide runs them:
    each serves its metrics on a port of its own (the first on 9301 unless another process
    had it, the others on free ones), says where in its metrics records, and counts there
    the records its batches read."""
    addresses = {q: {m.metrics_address for m in v.samples} for q, v in watch.views.items()}
    assert all(len(a) == 1 and "" not in a for a in addresses.values()), addresses
    ports = {next(iter(a)).rsplit(":", 1)[1] for a in addresses.values()}
    assert len(ports) == 3, addresses
    for query, found in addresses.items():
        address = next(iter(found))
        read = sample(scrape(f"http://{address}/metrics"), "streamctl_job_input_rows_total",
                      query=query)
        assert read is not None and read > 0, (query, address, read)


def _event_id(value: bytes) -> str:
    """Read back with the last job's own output format (plain Avro)."""
    from clickstream.alerts import job as alerts_job

    assert isinstance(alerts_job.output, Avro)
    return str(alerts_job.output.decoder()(value)["event_id"])


def _decisions(decisions: list[Decision]) -> str:
    return "\n".join(f"{d.decided_at_ms} {d.query_id} {d.action} {d.parameter} "
                     f"{d.current_value}->{d.target_value}: {d.reason}" for d in decisions)


def _status(log: Path, query: str, lines: int = 4) -> str:
    """The controller's last status lines for `query`: its model of the job when it held."""
    said = [line for line in log.read_text(errors="replace").splitlines()
            if f"controller.status: {query}:" in line]
    return "\n".join(said[-lines:])
