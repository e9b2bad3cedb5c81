"""`streamctl status` and `streamctl decisions` against the real broker (uuid topics per test):
what a job, a controller and a job's acks wrote is what the commands print."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from schemas import codec_for
from schemas.records import Outcome, _Record
from streamctl.cli import main
from tests.support.kafka import produce
from tests.unit.streamctl.test_board import ack, decision, metrics, sent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def produce_at(bootstrap: str, topic: str, records: list[_Record], stamp_ms: int = 0) -> None:
    """Records stamped now, or at `stamp_ms` (the commands read from a point in time)."""
    produce(bootstrap, topic, [codec_for(type(r)).encode(r) for r in records],
            timestamp_ms=stamp_ms)


def topics(new_topic: Callable[..., str]) -> dict[str, str]:
    return {"metrics": new_topic(), "decisions": new_topic(), "acks": new_topic(),
            "control": new_topic()}


def run(bootstrap: str, t: dict[str, str], *args: str) -> list[str]:
    return ["--bootstrap-servers", bootstrap, "--metrics-topic", t["metrics"],
            "--decisions-topic", t["decisions"], "--acks-topic", t["acks"],
            "--control-topic", t["control"], *args]


def test_status_prints_each_query_with_its_last_decision_and_pause_the_worst_first_or_those_asked(
        bootstrap_servers: str, new_topic: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    t = three_queries_running(bootstrap_servers, new_topic)
    now = int(time.time() * 1000)
    produce_at(bootstrap_servers, t["decisions"], [decision("c-1", now - 15_000)])
    produce_at(bootstrap_servers, t["acks"], [ack("c-1", Outcome.APPLIED, 4_100, now - 10_000)])
    # Garbage on a topic is reported with its position and skipped, never fatal.
    produce(bootstrap_servers, t["metrics"], [b"not avro"])

    assert main(["status", *run(bootstrap_servers, t, "--once")]) == 0
    out, err = capsys.readouterr()
    assert "skipped an undecodable record" in err and t["metrics"] in err
    row = next(line for line in out.splitlines() if line.startswith("q "))
    assert row.split()[1:5] == ["100", "100", "40", "2"]
    # Busy 5 s of the at least 10 s since its first batch began (the share's arithmetic:
    # tests/unit/streamctl/test_board.py), whenever status looked.
    assert 0 < int(row.split()[5].rstrip("%")) <= 50, row
    assert "scale_up input_parallelism 2→6" in row
    assert "reason: backlog 1 892 records growing 146/s" in out
    assert "last pause: 4.1 s" in out

    # Read afresh: the first read may take long enough on a busy machine for the queries to
    # fall silent, which orders them differently.
    t = three_queries_running(bootstrap_servers, new_topic)
    assert main(["status", *run(bootstrap_servers, t, "--once", "--top", "2")]) == 0
    out = capsys.readouterr().out
    assert _rows(out) == ["behind", "q"] and "1 more quer" in out, out
    assert main(["status", *run(bootstrap_servers, t, "--once", "--query", "c*")]) == 0
    assert _rows(capsys.readouterr().out) == ["calm"]


def three_queries_running(bootstrap: str, new_topic: Callable[..., str]) -> dict[str, str]:
    """New topics whose metrics hold ten batches of 0.5 s of queries q (40 records behind),
    calm (none) and behind (5 000), the last batch ending now: running for the next 10 s."""
    t = topics(new_topic)
    now = int(time.time() * 1000)
    produce_at(bootstrap, t["metrics"],
               [metrics(i, now - 10_000 + i * 1000, 100, (i + 1) * 100, (i + 1) * 100 + lag,
                        500, query) for i in range(10)
                for query, lag in (("q", 40), ("calm", 0), ("behind", 5_000))])
    return t


def _rows(out: str) -> list[str]:
    """The queries `status` printed a row for, in order (of the test's three)."""
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(("q ", "calm ", "behind "))]


def test_decisions_prints_the_log_with_acks_and_tuples_sent_by_hand_and_filters_by_query(
        bootstrap_servers: str, new_topic: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    t = topics(new_topic)
    now = int(time.time() * 1000)
    two_hours_ago = now - 7_200_000  # before the default --since-s
    produce_at(bootstrap_servers, t["decisions"], [decision("c-0", two_hours_ago)],
            stamp_ms=two_hours_ago)
    produce_at(bootstrap_servers, t["decisions"],
            [decision("c-1", now - 5_000), decision("c-2", now - 4_000, query="other")])
    produce_at(bootstrap_servers, t["acks"],
            [ack("c-1", Outcome.REJECTED, 0, now - 4_500, detail="stale epoch 1 ≤ 2")])
    # The controller's tuple beside its decision, and one sent by hand just now.
    produce_at(bootstrap_servers, t["control"],
               [sent("c-1", now - 5_000, issuer="streamctl-controller"),
                sent("h-1", now - 1_000, reason="load test")])

    assert main(["decisions", *run(bootstrap_servers, t, "--query", "q")]) == 0
    out = capsys.readouterr().out
    assert out.count("scale_up input_parallelism") == 1
    assert "[rejected, pause 0.0 s]" in out and "ack: stale epoch 1 ≤ 2" in out
    assert out.count("shed_fraction → 0.3") == 1, out
    assert "[sent by streamctl job send, no decision; no ack yet]\n    load test" in out


def test_an_unreachable_broker_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--once", "--bootstrap-servers", "127.0.0.1:1"]) == 1
    assert "streamctl stack up" in capsys.readouterr().err


def test_a_missing_topic_says_how_to_create_it(
        bootstrap_servers: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["decisions", "--bootstrap-servers", bootstrap_servers,
            "--decisions-topic", "no-such-topic-for-streamctl"]
    assert main(args) == 1
    assert "streamctl stack topics" in capsys.readouterr().err
