"""The guide's complete example job (docs/writing-jobs.md), run verbatim as a user would: saved
as a module in a directory of its own, outside the project, and started with `streamctl job run
--job checkouts:job` from there, on the real broker. JSON clicks in; the checkout clicks out,
each exactly once for a `read_committed` reader; garbage in the dead-letter topic, with the
reason in words. The README's ten lines are the same code."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from streamctl.processes import start_child
from tests.support.kafka import produce, read_committed_once_there

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
        alive = lambda: job.alive() or pytest.fail(f"the job died:\n{job.log_tail()}")  # noqa: E731
        got = [json.loads(m.value()) for m in read_committed_once_there(
            bootstrap_servers, topics["checkouts"], len(wanted), 180, alive)]
        assert sorted((r["user_id"], r["page"], r["ts"]) for r in got) == wanted
        letters = read_committed_once_there(bootstrap_servers, topics["dlq"], 2, 60)
        assert sorted(dict(m.headers() or [])["error"].decode() for m in letters) == [
            "field 'user_id' is missing, and the schema says NOT NULL",
            "not valid JSON: Expecting value at line 1 column 1"]
        assert (tmp_path / "state" / "checkpoints" / "checkouts" / "checkouts").is_dir()
    finally:
        job.stop()
