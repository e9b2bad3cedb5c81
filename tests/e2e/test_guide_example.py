"""The guide's complete example job (docs/writing-jobs.md), run verbatim as a user would: saved
as a module in a directory of its own, outside the project, and started with `streamctl job run
--job checkouts:job` from there, on the real broker. JSON clicks in; the checkout clicks out,
each exactly once for a `read_committed` reader; garbage in the dead-letter topic, with the
reason in words. The README's ten lines are the same code."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streamctl.loadgen import producer_config
from streamctl.processes import start_child
from tests.integration.committed_reader import read_committed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).parents[2]
BLOCK = re.compile(r"<!-- guide-example:begin -->\s*```python\n(.*?)```\s*"
                   r"<!-- guide-example:end -->", re.S)


def guide_example() -> str:
    found = BLOCK.search((ROOT / "docs" / "writing-jobs.md").read_text())
    assert found, "docs/writing-jobs.md has no guide-example block"
    return found.group(1)


def test_the_readme_shows_the_guides_example() -> None:
    readme = (ROOT / "README.md").read_text()
    body = guide_example().split('"""\n', 2)[-1]  # the code, without its docstring line
    assert body.strip() in readme


def test_the_guides_example_runs_from_outside_the_project(
        bootstrap_servers: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    project = tmp_path / "myjobs"
    project.mkdir()
    (project / "checkouts.py").write_text(guide_example())
    topics = {name: new_topic(partitions=2 if name == "clicks" else 1)
              for name in ("clicks", "checkouts", "dlq", "metrics", "control", "acks")}
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": bootstrap_servers,
           "STREAMCTL_METRICS_TOPIC": topics["metrics"],
           "STREAMCTL_CONTROL_TOPIC": topics["control"], "STREAMCTL_ACK_TOPIC": topics["acks"],
           "STREAMCTL_STATE_DIR": str(tmp_path / "state")}
    clicks = [{"user_id": f"u{i % 7}", "page": page, "ts": 1_700_000_000_000 + i}
              for i, page in enumerate(["/", "/checkout", "/cart", "/checkout/pay"] * 25)]
    produce(bootstrap_servers, topics["clicks"],
            [json.dumps(c).encode() for c in clicks] + [b"<html>", b'{"page": "/checkout"}'])
    job = start_child("checkouts", [
        "job", "run", "--job", "checkouts:job", "--input-topic", topics["clicks"],
        "--output-topic", topics["checkouts"], "--dlq-topic", topics["dlq"],
        "--metrics-port", "0", "--trigger-interval-s", "1"], tmp_path / "logs", env,
        cwd=project)
    try:
        wanted = sorted((c["user_id"], c["page"], c["ts"]) for c in clicks
                        if c["page"].startswith("/checkout"))
        got = until_read(bootstrap_servers, topics["checkouts"], len(wanted), job.alive,
                         job.log_tail)
        assert sorted((r["user_id"], r["page"], r["ts"]) for r in got) == wanted
        letters = until_read_raw(bootstrap_servers, topics["dlq"], 2)
        assert sorted(dict(m.headers() or [])["error"].decode() for m in letters) == [
            "field 'user_id' is missing, and the schema says NOT NULL",
            "not valid JSON: Expecting value at line 1 column 1"]
        assert (tmp_path / "state" / "checkpoints" / "checkouts" / "checkouts").is_dir()
    finally:
        job.stop()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer(producer_config(bootstrap))
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def until_read(bootstrap: str, topic: str, count: int, alive: Callable[[], bool],
               log: Callable[[], str], timeout_s: float = 180.0) -> list[dict[str, object]]:
    """The topic's committed JSON records once there are `count`, and none more a second
    later (a duplicate would show)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert alive(), f"the job died:\n{log()}"
        records = [json.loads(m.value()) for m in read_committed(bootstrap, topic)]
        if len(records) >= count:
            time.sleep(1.0)
            return [json.loads(m.value()) for m in read_committed(bootstrap, topic)]
        time.sleep(1.0)
    raise AssertionError(f"fewer than {count} records in {topic} after {timeout_s:.0f} s:\n"
                         f"{log()}")


def until_read_raw(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        messages = read_committed(bootstrap, topic)
        if len(messages) >= count:
            return messages
        time.sleep(0.5)
    raise AssertionError(f"fewer than {count} records in {topic} after {timeout_s:.0f} s")


def test_a_builder_with_the_wrong_columns_stops_job_run_before_a_batch(
        bootstrap_servers: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    """What the user sees: `job run` exits 2 with the job's name and the problem, having run
    nothing (no checkpoint batch, no output)."""
    project = tmp_path / "myjobs"
    project.mkdir()
    (project / "wrong.py").write_text(guide_example().replace(
        '.select("user_id", "page", "ts")', '.selectExpr("page", "ts AS user_id")').replace(
        'output=Json(key="user_id")', 'output=Json("user_id string, page string", '
                                       'key="user_id")'))
    topics = {name: new_topic() for name in ("clicks", "out", "dlq", "metrics", "control",
                                             "acks")}
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": bootstrap_servers,
           "STREAMCTL_METRICS_TOPIC": topics["metrics"],
           "STREAMCTL_CONTROL_TOPIC": topics["control"], "STREAMCTL_ACK_TOPIC": topics["acks"],
           "STREAMCTL_STATE_DIR": str(tmp_path / "state")}
    job = start_child("wrong", [
        "job", "run", "--job", "wrong:job", "--input-topic", topics["clicks"],
        "--output-topic", topics["out"], "--dlq-topic", topics["dlq"], "--metrics-port", "0"],
        tmp_path / "logs", env, cwd=project)
    try:
        assert job.process.wait(120) == 2, job.log_tail()
        assert ("job run: job 'checkouts': the builder's columns (page, user_id) do not fit its "
                "output, JSON (2 fields, key user_id): column 'user_id' is bigint, the field "
                "needs string") in job.log_tail()
    finally:
        job.stop()
    assert read_committed(bootstrap_servers, topics["out"]) == []
