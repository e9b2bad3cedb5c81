"""`streamctl status` and `streamctl decisions`: read streamctl's topics and print the board.

Owns the commands' options, reading the metrics, decisions and acks topics from a point in
time, the live refresh, and the errors a user can act on (no broker, no topics). The folding
and the text are in `board`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from schemas.records import Ack, ControlTuple, Decision, TaskMetrics
from streamctl.board import (
    SETTLE_MS,
    Board,
    Selection,
    ack_line,
    decision_lines,
    source_partitions,
    status_table,
    tuple_lines,
)
from streamctl.errors import UserFacingError
from streamctl.settings import add_bootstrap_option, kafka_security
from streamctl.stack.defaults import ACKS_TOPIC, CONTROL_TOPIC, DECISIONS_TOPIC, METRICS_TOPIC
from streamctl.tail import Tail

_CLEAR = "\x1b[H\x1b[2J"


def add_watch_commands(groups: argparse._SubParsersAction) -> None:
    status = groups.add_parser(
        "status", help="a live table of the queries: rates, lag, parallelism, decisions",
        description="Per query: arrival and processing rate, lag, input parallelism, share "
        "of time busy, when its metrics were last seen, the controller's last decision with "
        "its reason, and the last reconfiguration pause. Read from the metrics, decisions "
        "and acks topics.", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _add_topic_options(status)
    status.add_argument("--since-s", type=float, default=600.0,
                        help="read this many seconds of history at start")
    status.add_argument("--refresh-s", type=float, default=2.0, help="seconds between redraws")
    status.add_argument("--once", action="store_true",
                        help="print one table and exit (the default when stdout is not a terminal)")
    status.add_argument("--query", help="only query ids that match this shell-style pattern "
                        "(e.g. 'payments-*'); default: all")
    status.add_argument("--top", type=_count, default=30,
                        help="show at most this many queries, those that need attention "
                        "first: down, halted, then the most lag (0: all)")
    status.set_defaults(handler=_status)

    decisions = groups.add_parser(
        "decisions", help="tail the controller's decision log (with each decision's ack)",
        description="Print the controller's decisions with their reasons and the jobs' acks, "
        "and every control tuple no decision names (sent by hand or by another tool) with "
        "its sender; with --follow, keep printing new ones.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _add_topic_options(decisions)
    decisions.add_argument("--since-s", type=float, default=3600.0,
                           help="print decisions of the last this many seconds")
    decisions.add_argument("--query", help="only query ids that match this shell-style "
                           "pattern (an id, or e.g. 'payments-*')")
    decisions.add_argument("-f", "--follow", action="store_true",
                           help="keep printing new decisions until Ctrl-C")
    decisions.set_defaults(handler=_decisions)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _add_topic_options(p: argparse.ArgumentParser) -> None:
    add_bootstrap_option(p)
    p.add_argument("--metrics-topic", default=METRICS_TOPIC,
                   help="where the jobs publish their per-batch metrics")
    p.add_argument("--decisions-topic", default=DECISIONS_TOPIC,
                   help="the controller's decision log")
    p.add_argument("--acks-topic", default=ACKS_TOPIC,
                   help="where the jobs answer each control tuple")
    p.add_argument("--control-topic", default=CONTROL_TOPIC,
                   help="the control tuples: a controller's, and any sent by hand")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _open_tail(args: argparse.Namespace, topics: dict[str, type]) -> Tail:
    start_ms = int(time.time() * 1000 - args.since_s * 1000)
    security = kafka_security()
    try:
        return Tail(args.bootstrap_servers, topics, start_at_ms=start_ms, client_log_level=0,
                    security=security)
    except KafkaException as exc:
        raise UserFacingError(
            f"cannot reach Kafka at {args.bootstrap_servers} as {security.describe()} "
            f"({exc.args[0].str()}): start the local broker with `streamctl stack up`, or "
            "point --bootstrap-servers / STREAMCTL_BOOTSTRAP_SERVERS at yours (a secured "
            "broker also needs the STREAMCTL_KAFKA_* settings)") from None
    except RuntimeError as exc:
        hint = ("the principal in STREAMCTL_KAFKA_SASL_USERNAME may not read it (ACLs): use "
                "one that may, e.g. the admin" if "AUTHORIZATION" in str(exc)
                else "create streamctl's topics with `streamctl stack topics`")
        raise UserFacingError(f"{exc}; {hint}") from None


def _drain(tail: Tail, board: Board, budget_s: float = 10.0) -> None:
    """Read what the topics held when asked (at most `budget_s`), so the table is complete: a
    first poll that returns nothing, as on a slow or busy broker, is no end (behind an open
    transaction the end is never reached; the budget ends it)."""
    deadline = time.monotonic() + budget_s
    ends = tail.ends_now()
    while time.monotonic() < deadline:
        records = tail.poll(timeout_s=0.3, max_records=2000)
        board.add_all(r for _, r in records)
        if not records and tail.reached(ends):
            return


def _report_garbage(tail: Tail, seen: int) -> int:
    for err in tail.decode_errors[seen:]:
        print(f"streamctl: skipped an undecodable record: {err}", file=sys.stderr)
    return len(tail.decode_errors)


def _status(args: argparse.Namespace) -> int:
    tail = _open_tail(args, {args.metrics_topic: TaskMetrics, args.decisions_topic: Decision,
                             args.acks_topic: Ack, args.control_topic: ControlTuple})
    board, garbage = Board(), 0
    live = not args.once and sys.stdout.isatty()
    try:
        while True:
            _drain(tail, board)
            garbage = _report_garbage(tail, garbage)
            table = "\n".join(status_table(board, _now_ms(),
                                            ends=tail.end_offsets(source_partitions(board)),
                                            selection=Selection(args.query, args.top)))
            print(f"{_CLEAR}{table}" if live else table, flush=True)
            if not live:
                return 0
            time.sleep(args.refresh_s)
    finally:
        tail.close()


def _decisions(args: argparse.Namespace) -> int:
    tail = _open_tail(args, {args.decisions_topic: Decision, args.acks_topic: Ack,
                             args.control_topic: ControlTuple})
    log = DecisionPrinter(Board(), args.query)
    garbage = 0
    try:
        _drain(tail, log.board)
        # Read to the end together: a tuple without its decision by now was sent by hand.
        if log.print_new(_now_ms() + SETTLE_MS) == 0 and not args.follow:
            print(f"no decisions or control tuples in the last {args.since_s:.0f} s")
        while args.follow:
            log.board.add_all(r for _, r in tail.poll(timeout_s=1.0))
            garbage = _report_garbage(tail, garbage)
            log.print_new(_now_ms())
        return 0
    finally:
        tail.close()


class DecisionPrinter:
    """Prints each decision once, when it arrives, with the ack known by then; an ack that
    arrives later is printed on its own line when it comes."""

    def __init__(self, board: Board, query: str | None,
                 out: Callable[[str], None] = lambda line: print(line, flush=True)) -> None:
        self.board, self._selection, self._out = board, Selection(query), out
        self._done = 0
        self._tuples_done: set[str] = set()
        self._awaiting_ack: set[str] = set()

    def print_new(self, now_ms: int) -> int:
        """Prints what is new (tuples no decision names once settled by `now_ms`, `board`);
        returns how many decisions and such tuples it printed."""
        printed = 0
        for decision in self.board.decisions[self._done:]:
            if not self._selection.matches(decision.query_id):
                continue
            ack = self.board.ack_for(decision)
            self._out("\n".join(decision_lines(decision, ack)))
            printed += 1
            if decision.control_id and ack is None and not decision.dry_run:
                self._awaiting_ack.add(decision.control_id)
        self._done = len(self.board.decisions)
        for sent in self.board.other_tuples(now_ms):
            if sent.control_id in self._tuples_done or not self._selection.matches(sent.query_id):
                continue
            ack = self.board.acks.get(sent.control_id)
            self._out("\n".join(tuple_lines(sent, ack)))
            self._tuples_done.add(sent.control_id)
            printed += 1
            if ack is None:
                self._awaiting_ack.add(sent.control_id)
        for control_id in sorted(self._awaiting_ack & self.board.acks.keys()):
            self._out(ack_line(self.board.acks[control_id]))
            self._awaiting_ack.discard(control_id)
        return printed
