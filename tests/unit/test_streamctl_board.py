"""`streamctl status` / `streamctl decisions`: the board folded from metrics, decisions, acks."""

from __future__ import annotations

import pytest

from schemas import Role, SourcePartition, TaskMetrics
from schemas.records import TAKEOVER, Ack, Decision, Outcome
from streamctl.board import Board, decision_lines, status_table
from streamctl.watch import DecisionPrinter

T0 = 1_800_000_000_000


def metrics(batch: int, start_ms: int, rows: int, end: int, latest: int, busy_ms: int = 800,
            query: str = "q", parallelism: int = 2) -> TaskMetrics:
    return TaskMetrics(
        query, "i-1", Role.ACTIVE, 0, batch, start_ms, start_ms + busy_ms, 1000, rows, 0,
        busy_ms, (SourcePartition("in", 0, end - rows, end, latest),), parallelism, 4, 16)


def decision(control_id: str | None, at_ms: int, query: str = "q", dry_run: bool = False,
             reason: str = "backlog 1 892 records growing 146/s") -> Decision:
    return Decision(f"d-{control_id}", query, at_ms, "scale_up", "input_parallelism", "2", "6",
                    reason, {"arrival_rate": 367.0}, control_id, dry_run)


def ack(control_id: str, outcome: Outcome, pause_ms: int, at_ms: int,
        detail: str = "input_parallelism 2→6") -> Ack:
    return Ack(control_id, "q", "i-1", 1, outcome, detail, pause_ms, at_ms)


def steady(board: Board, query: str = "q", rate: int = 100, busy_ms: int = 500) -> None:
    """Ten one-second batches at `rate` records/s, each busy for `busy_ms`."""
    for i in range(10):
        end = (i + 1) * rate
        board.add(metrics(i, T0 + i * 1000, rate, end, end + 50, busy_ms, query))


def test_a_row_per_query_with_rates_lag_and_busy_share() -> None:
    board = Board()
    steady(board, "alpha", rate=100, busy_ms=500)
    steady(board, "beta", rate=300, busy_ms=900)
    lines = status_table(board, now_ms=T0 + 10_000)  # as the last batches end
    alpha = next(line for line in lines if line.startswith("alpha"))
    beta = next(line for line in lines if line.startswith("beta"))
    assert alpha.split()[1:6] == ["100", "100", "50", "2", "50%"]
    assert beta.split()[1:3] == ["300", "300"]
    assert "90%" in beta
    assert "no decision yet" in alpha


def test_the_busy_share_covers_the_last_30_s_to_now_so_an_idle_query_reads_zero() -> None:
    board = Board()
    steady(board, busy_ms=900)  # batches end at T0 + 1 s … T0 + 10 s
    status = board.queries["q"]
    assert status.busy_share(T0 + 10_000) == pytest.approx(0.9)
    assert status.busy_share(T0 + 20_000) == pytest.approx(0.45)  # 9 s busy of 20 s seen
    assert status.busy_share(T0 + 40_000) == pytest.approx(0.0)  # nothing in the last 30 s
    row = next(line for line in status_table(board, now_ms=T0 + 60_000)
               if line.startswith("q "))
    assert row.split()[5] == "0%"


def test_the_last_decision_reason_and_last_pause_are_shown_with_their_age() -> None:
    board = Board()
    steady(board)
    board.add(decision("c-1", T0 + 5_000))
    board.add(ack("c-1", Outcome.APPLIED, 4_073, T0 + 9_000))
    lines = "\n".join(status_table(board, now_ms=T0 + 20_000))
    assert "scale_up input_parallelism 2→6, 15s ago" in lines
    assert "reason: backlog 1 892 records growing 146/s" in lines
    assert "last pause: 4.1 s, 11s ago (applied: input_parallelism 2→6)" in lines


def test_an_empty_board_says_what_to_check() -> None:
    assert "is a job running" in status_table(Board(), now_ms=T0)[-1]


def test_the_first_line_names_the_leading_controller_and_counts_takeovers() -> None:
    board = Board()
    assert "no takeover in the period read" in status_table(board, now_ms=T0)[0]
    for instance, at_ms in (("c-1", T0), ("c-2", T0 + 30_000)):
        board.add(Decision(f"t-{instance}", "", at_ms, TAKEOVER, "leader", "", instance,
                           f"controller instance {instance} leads from now on", {}, None))
    board.add(decision("c-3", T0 + 31_000))
    lines = status_table(board, now_ms=T0 + 40_000)
    assert lines[0] == "controller: c-2 leads, since 10s ago (2 takeovers in the period read)"
    assert not any(line.startswith(" ") and "leads from now on" in line for line in lines)
    assert set(board.queries) == {"q"}  # a takeover is no query's decision


def test_decision_lines_say_whether_it_was_sent_and_what_the_job_answered() -> None:
    rejected = ack("c-2", Outcome.REJECTED, 0, T0, detail="stale epoch 1 ≤ 2 in force")
    assert "[rejected, pause 0.0 s]" in decision_lines(decision("c-2", T0), rejected)[0]
    assert "    ack: stale epoch 1 ≤ 2 in force" in decision_lines(decision("c-2", T0), rejected)
    assert "[dry run, not sent]" in decision_lines(decision(None, T0, dry_run=True), None)[0]
    assert "[advice, nothing sent]" in decision_lines(decision(None, T0), None)[0]
    assert "[no ack yet]" in decision_lines(decision("c-3", T0), None)[0]


def test_the_follower_prints_each_decision_once_and_a_late_ack_on_its_own_line() -> None:
    board, out = Board(), []
    printer = DecisionPrinter(board, query="q", out=out.append)
    board.add(decision("c-1", T0))
    board.add(decision("c-9", T0, query="other"))
    assert printer.print_new() == 1
    assert printer.print_new() == 0
    board.add(ack("c-1", Outcome.APPLIED, 5_281, T0 + 6_000))
    printer.print_new()
    assert len(out) == 2
    assert out[1].startswith("    ack for q control c-1: applied, pause 5.3 s")
