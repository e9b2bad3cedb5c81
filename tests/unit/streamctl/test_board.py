"""`streamctl status` / `streamctl decisions`: the board folded from metrics, decisions, acks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.explain.report import takeover_record
from schemas import Role, SourcePartition, TaskMetrics
from schemas.records import TAKEOVER, Ack, ControlTuple, Decision, Outcome
from streamctl.board import SETTLE_MS, Board, Selection, decision_lines, status_table
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
    assert alpha.split()[7] == "running"
    assert "no decision in the period read" in alpha


def rows(lines: list[str]) -> list[str]:
    """The query ids of a table's rows, in order."""
    return [line.split()[0] for line in lines[2:] if line[:1].strip() and "more quer" not in line]


def test_a_fleet_shows_the_queries_down_first_then_the_most_lag_at_most_top_of_them() -> None:
    board = Board()
    for name, lag in (("calm-1", 0), ("calm-2", 0), ("behind", 5000), ("lagging", 900)):
        for i in range(10):
            end = (i + 1) * 100
            board.add(metrics(i, T0 + i * 1000, 100, end, end + lag, 500, name))
    for i in range(10):  # heard last a minute before the others: down
        board.add(metrics(i, T0 - 70_000 + i * 1000, 100, (i + 1) * 100, (i + 1) * 100, 500,
                          "down"))
    lines = status_table(board, T0 + 10_000, selection=Selection(top=3))
    assert rows(lines) == ["down", "behind", "lagging"]
    assert lines[-1].startswith("… 2 more queries not shown")
    everything = status_table(board, T0 + 10_000, selection=Selection(top=0))
    assert rows(everything) == ["down", "behind", "lagging", "calm-1", "calm-2"]


def test_a_thousand_queries_show_as_the_top_few_behind_first_and_a_pattern_finds_any_of_them(
        ) -> None:
    board = Board()
    lags = {f"q-{n:04d}": (n * 37) % 1000 for n in range(1000)}  # distinct lags, shuffled
    for name, lag in lags.items():
        for i in range(3):
            end = (i + 1) * 100
            board.add(metrics(i, T0 + 7_000 + i * 1000, 100, end, end + lag, 500, name))
    worst = sorted(lags, key=lambda name: -lags[name])

    lines = status_table(board, T0 + 10_000, selection=Selection(top=20))

    assert rows(lines) == worst[:20]
    assert lines[-1].startswith("… 980 more queries not shown")
    assert rows(status_table(board, T0 + 10_000, selection=Selection("q-0999"))) == ["q-0999"]
    assert len(rows(status_table(board, T0 + 10_000, selection=Selection("q-09*", top=0)))) == 100


def test_a_pattern_narrows_the_table_and_one_that_matches_nothing_says_so() -> None:
    board = Board()
    for name in ("payments-eu", "payments-us", "search"):
        steady(board, name)
    assert rows(status_table(board, T0 + 10_000, selection=Selection("payments-*"))) == [
        "payments-eu", "payments-us"]
    missed = status_table(board, T0 + 10_000, selection=Selection("billing-*"))
    assert missed[-1] == "no query id matches 'billing-*' among the 3 in the period read"


def test_the_decision_log_takes_a_pattern_of_query_ids() -> None:
    board = Board()
    board.add(decision("c-1", T0, query="payments-eu"))
    board.add(decision("c-2", T0, query="search"))
    out: list[str] = []
    DecisionPrinter(board, query="payments-*", out=out.append).print_new(T0)
    assert len(out) == 1 and "payments-eu" in out[0]


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


def test_the_first_line_names_each_instances_shards_when_they_divide_the_queries() -> None:
    board = Board()
    for instance, shards, at_ms in (("c-1", (0, 1, 2, 3), T0), ("c-2", (1, 3), T0 + 10_000),
                                    ("c-1", (3,), T0 + 30_000)):
        board.add(takeover_record(instance, decision_id=f"t-{at_ms}", now_ms=at_ms,
                                  resumed=(), gained=shards, shards=4))
    [line] = status_table(board, now_ms=T0 + 40_000)[:1]
    assert line == ("controller: c-1 shards 0, 2, 3 of 4; c-2 shard 1 of 4; the last takeover "
                    "10s ago (3 takeovers in the period read)")


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
    assert printer.print_new(T0) == 1
    assert printer.print_new(T0) == 0
    board.add(ack("c-1", Outcome.APPLIED, 5_281, T0 + 6_000))
    printer.print_new(T0 + 6_000)
    assert len(out) == 2
    assert out[1].startswith("    ack for q control c-1: applied, pause 5.3 s")


def sent(control_id: str, at_ms: int, query: str = "q", issuer: str = "streamctl job send",
         reason: str = "") -> ControlTuple:
    return ControlTuple(control_id, query, "operator", "shed_fraction", "0.3", 4, issuer, reason,
                        at_ms)


def test_a_tuple_no_decision_names_is_printed_once_settled_with_its_sender_and_ack() -> None:
    board, out = Board(), []
    printer = DecisionPrinter(board, query="q", out=out.append)
    board.add_all([decision("c-1", T0), sent("c-1", T0, issuer="streamctl-controller"),
                   sent("h-1", T0 + 1_000, reason="load test"), sent("h-2", T0, query="other")])
    assert printer.print_new(T0 + 2_000) == 1  # the decision; the hand tuple may be its own yet
    assert printer.print_new(T0 + 1_000 + SETTLE_MS) == 1
    assert out[1].split("\n") == [
        "2027-01-15 08:00:01Z  q  shed_fraction → 0.3 (epoch 4)  [sent by streamctl job send, "
        "no decision; no ack yet]", "    load test"]
    board.add(ack("h-1", Outcome.APPLIED, 400, T0 + 9_000))
    assert printer.print_new(T0 + 10_000) == 0
    assert out[2].startswith("    ack for q control h-1: applied, pause 0.4 s")


def test_status_shows_a_tuple_sent_by_hand_when_newer_than_the_last_decision() -> None:
    board = Board()
    steady(board)
    board.add_all([decision("c-1", T0), sent("h-1", T0 + 2_000, reason="load test")])
    lines = status_table(board, T0 + 10_000)
    row = next(line for line in lines if line.startswith("q "))
    assert row.endswith("shed_fraction → 0.3 sent by streamctl job send, 8s ago")
    assert "reason: load test" in [line.strip() for line in lines]
    board.add(decision("c-2", T0 + 3_000))
    assert "scale_up input_parallelism 2→6" in next(
        line for line in status_table(board, T0 + 10_000) if line.startswith("q "))


def test_a_job_that_is_down_reads_the_lag_the_broker_holds_and_no_current_rates() -> None:
    """Its last batch left partition 0 at 1 000; the broker has 68 894 records there now."""
    board = Board()
    steady(board)
    board.add(replace(metrics(-1, T0 + 10_000, 0, 1000, 1000, busy_ms=0), stopped=True))
    now = T0 + 80_000
    row = next(line for line in status_table(board, now, ends={("in", 0): 68_894})
               if line.startswith("q "))
    assert row.split()[1:4] == ["-", "-", "67894"] and row.split()[7] == "stopped"
    # Killed: silent, the same truth; unknown when the broker's end offset is not known.
    killed = Board()
    steady(killed)
    row = next(line for line in status_table(killed, now, ends={("in", 0): 68_894})
               if line.startswith("q "))
    assert row.split()[3] == "67894" and row.split()[7] == "silent"
    row = next(line for line in status_table(killed, now) if line.startswith("q "))
    assert row.split()[1:4] == ["-", "-", "?"]


def test_a_halted_job_says_why_what_it_lost_and_where_its_metrics_are() -> None:
    board = Board()
    steady(board)
    board.add(replace(metrics(-1, T0 + 10_000, 0, 1000, 1000, busy_ms=0),
                      halted="input lost to retention: restart with --on-data-loss skip",
                      lost_ranges=(SourcePartition("in", 0, 1000, 1500, 9000),),
                      metrics_address="127.0.0.1:9302"))
    lines = status_table(board, T0 + 12_000, ends={("in", 0): 9000})
    assert next(line for line in lines if line.startswith("q ")).split()[7] == "halted"
    assert "   halted: input lost to retention: restart with --on-data-loss skip" in \
        "\n".join(lines)
    assert any(line.strip() == "input lost to retention: 500 records (in/0 offsets 1000-1499)"
               for line in lines)
    assert any(line.strip() == "metrics: 127.0.0.1:9302 (i-1)" for line in lines)


def test_a_lag_held_by_one_partition_is_named() -> None:
    board = Board()
    board.add(TaskMetrics("q", "i-1", Role.ACTIVE, 0, 0, T0, T0 + 500, 1000, 10, 0, 500,
                          (SourcePartition("in", 0, 0, 100, 100),
                           SourcePartition("in", 1, 0, 100, 100)), 2, 4, 16))
    lines = status_table(board, T0 + 1_000, ends={("in", 0): 1000, ("in", 1): 200})
    assert any(line.strip() == "skew: partition in/0 holds 90% of the lag across 2 partitions"
               for line in lines)


def test_each_objective_the_job_states_is_shown_met_or_not_and_unknown_while_it_is_down(
        ) -> None:
    board = Board()
    for i in range(10):  # 100/s in 1 s batches, busy 0.8 s each: 125/s flat out, 50 behind
        end = (i + 1) * 100
        board.add(replace(metrics(i, T0 + i * 1000, 100, end, end + 50), max_delay_ms=5_000,
                          drain_within_ms=60_000))

    def objective_lines(lines: list[str]) -> list[str]:
        return [line.strip() for line in lines if line.strip().startswith("objective:")]

    assert objective_lines(status_table(board, T0 + 10_000)) == [
        "objective: delay 1.4 s of at most 5 s: met",  # 50 / 125 + 1
        "objective: backlog drains in 0 s of at most 60 s: met"]  # the running batch's
    behind = status_table(board, T0 + 10_000, ends={("in", 0): 1_600})  # 600 waiting
    assert objective_lines(behind) == [
        "objective: delay 5.8 s of at most 5 s: NOT met",  # 600 / 125 + 1
        "objective: backlog drains in 20 s of at most 60 s: met"]  # (600 − 100) / (125 − 100)
    down = status_table(board, T0 + 80_000, ends={("in", 0): 68_894})
    assert objective_lines(down) == ["objective: delay ? of at most 5 s: unknown",
                                     "objective: backlog drains in ? of at most 60 s: unknown"]
    plain = Board()
    steady(plain)
    assert objective_lines(status_table(plain, T0 + 10_000)) == []


def test_the_shedding_in_force_is_shown_with_the_jobs_bound() -> None:
    board = Board()
    steady(board)
    assert not any("shedding:" in line for line in status_table(board, T0 + 10_000))
    newest = board.queries["q"].newest()
    assert newest is not None
    board.add(replace(newest, batch_id=newest.batch_id + 1, shed_fraction=0.35,
                      max_shed_fraction=0.5, batch_start_ms=newest.batch_end_ms,
                      batch_end_ms=newest.batch_end_ms + 800))
    assert any(line.strip() == "shedding: 35% of the low-priority records (the job's bound 50%)"
               for line in status_table(board, T0 + 11_000))
