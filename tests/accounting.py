"""Exact accounting of the bundled jobs' output against what the load generator produced.

The load generator's `Ledger` holds, per sensor and event-time window, the count and the sum
of sequence numbers of every record the broker acknowledged. The job emits one row per sensor
and window with the same two figures. A lost record shows as a smaller count or sum, a
duplicated one as a larger, and a window written twice as two rows. For the fraud job the
`CardLedger` holds per account the transactions acknowledged, numbered from 0 by
`account_seq`; the job scores each once, with the account's running count. The output is read
`read_committed`, as a downstream consumer of an exactly-once job would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from schemas import ScoredTransaction, SensorReading, SensorWindowAverage, codec_for
from streamctl.cards import CardLedger
from streamctl.loadgen import Ledger
from streamctl.tail import Tail
from tests.support.kafka import decoded_or_none, produce, read_committed
from tests.support.waiting import until

FLUSH_SENSOR = "zz-flush"


def flush_last_windows(bootstrap: str, topic: str, partitions: int = 2) -> None:
    """A record far in event time moves the watermark past every real window, so the job
    emits them all (append mode emits a window once, when the watermark closes it)."""
    future = int(time.time() * 1000) + 10 * 60_000
    flush = codec_for(SensorReading).encode(SensorReading(FLUSH_SENSOR, future, 0.0, -1))
    for partition in range(partitions):
        produce(bootstrap, topic, [flush], partition=partition)


WindowKey = tuple[str, int]
"""(sensor id, window start ms)."""


def _window_rows(bootstrap: str, topic: str, expected: set[WindowKey],
                 timeout_s: float) -> dict[WindowKey, list[SensorWindowAverage]]:
    """The output's rows per window, read until every `expected` window is there; no window
    may be written twice."""
    rows: dict[WindowKey, list[SensorWindowAverage]] = {}
    out = Tail(bootstrap, {topic: SensorWindowAverage}, from_beginning=True)

    def collect() -> bool:
        for _topic, row in out.poll(0.5, 5000):
            assert isinstance(row, SensorWindowAverage)
            rows.setdefault((row.sensor_id, row.window_start_ms), []).append(row)
        return expected <= set(rows)

    try:
        until(collect, timeout_s, "every produced window in the output", 0)
        collect()  # anything still in flight past the last expected window
    finally:
        out.close()
    assert out.decode_errors == []
    duplicated = {k: v for k, v in rows.items() if len(v) > 1}
    assert not duplicated, f"windows emitted more than once: {list(duplicated)[:5]}"
    return rows


def assert_every_record_accounted_for(bootstrap: str, topic: str, ledger: Ledger,
                                      timeout_s: float = 120.0, *,
                                      input_topic: str | None = None) -> None:
    """Every acknowledged record in exactly one output row; no window written twice. With
    `input_topic`, a failure also says where in the input the missing records are."""
    rows = _window_rows(bootstrap, topic, set(ledger.counts), timeout_s)
    produced = {k: (ledger.counts[k], ledger.seq_sums[k]) for k in ledger.counts}
    emitted = {k: (v[0].count, v[0].seq_sum) for k, v in rows.items() if k[0] != FLUSH_SENSOR}
    missing = {k: (produced[k], emitted.get(k)) for k in produced if emitted.get(k) != produced[k]}
    extra = set(emitted) - set(produced)
    assert not missing and not extra, (
        f"{len(missing)} windows differ (produced, emitted), e.g. {list(missing.items())[:3]}; "
        f"{len(extra)} windows nobody produced, e.g. {list(extra)[:3]}"
        f"{_where_in_input(bootstrap, input_topic, missing)}")


def assert_high_priority_exact_and_the_rest_shed(
        bootstrap: str, topic: str, ledger: Ledger, low_priority: Callable[[str], bool],
        rows_shed: int, timeout_s: float = 120.0) -> int:
    """Load shedding's account: every high-priority record in exactly one output row (as
    `assert_every_record_accounted_for`); of the low-priority sensors, no window written twice
    or holding more than was produced, and the records emitted plus the `rows_shed` the job
    reported are what was produced. Returns the low-priority records emitted."""
    high = {k for k in ledger.counts if not low_priority(k[0])}
    rows = _window_rows(bootstrap, topic, high, timeout_s)
    emitted = {k: (v[0].count, v[0].seq_sum) for k, v in rows.items() if k[0] != FLUSH_SENSOR}
    wrong = {k: ((ledger.counts[k], ledger.seq_sums[k]), emitted.get(k)) for k in high
             if emitted.get(k) != (ledger.counts[k], ledger.seq_sums[k])}
    assert not wrong, f"{len(wrong)} high-priority windows differ (produced, emitted), e.g. " \
                      f"{list(wrong.items())[:3]}"
    low_emitted = {k: count for k, (count, _sum) in emitted.items() if k not in high}
    assert all(low_priority(k[0]) and count <= ledger.counts.get(k, 0)
               for k, count in low_emitted.items()), \
        f"low-priority windows nobody produced, or with more than produced: {low_emitted}"
    produced_low = sum(n for k, n in ledger.counts.items() if k not in high)
    assert sum(low_emitted.values()) + rows_shed == produced_low, (
        f"low-priority: {sum(low_emitted.values())} emitted + {rows_shed} shed != "
        f"{produced_low} produced")
    return sum(low_emitted.values())


Differences = Mapping[tuple[str, int], tuple[tuple[int, int], tuple[int, int] | None]]


def _where_in_input(bootstrap: str, input_topic: str | None, missing: Differences) -> str:
    """Where in the input (partition, offset) the record a window lacks is, for the windows
    short of exactly one (its sequence number is the difference of the sums): read against
    the checkpoint's offset log, that tells a batch that skipped it from a record appended
    after its window closed."""
    lost_seqs = {produced[1] - emitted[1] for produced, emitted in missing.values()
                 if emitted is not None and produced[0] - emitted[0] == 1}
    if input_topic is None or not lost_seqs:
        return ""
    messages = read_committed(bootstrap, input_topic)
    found = [f"seq {r.seq} ({r.sensor_id}, event time {r.event_time_ms}) at partition "
             f"{m.partition()} offset {m.offset()}"
             for m, r in zip(messages, decoded_or_none(messages, SensorReading), strict=True)
             if r is not None and r.seq in lost_seqs]
    return f"; in the input: {found or 'none of ' + str(sorted(lost_seqs))}"


def assert_every_transaction_scored_once(bootstrap: str, topic: str, ledger: CardLedger,
                                         timeout_s: float = 120.0) -> None:
    """Per account, every acknowledged transaction (account_seq 0 … n−1) scored exactly once,
    with the account's count running 1 … n: no loss, no duplicate, no state reset."""
    assert ledger.failed == 0
    assert_transactions_scored_once(bootstrap, topic, ledger.snapshot(), timeout_s,
                                    load_stopped=True)


def assert_transactions_scored_once(bootstrap: str, topic: str, acked: Mapping[str, int],
                                    timeout_s: float = 120.0, *,
                                    load_stopped: bool = False) -> None:
    """`assert_every_transaction_scored_once` up to a cut: per account, the first `acked[a]`
    transactions (what the ledger held when the cut was taken, while load goes on) scored
    exactly once with a running count; later ones are not looked at unless the load has
    stopped, when nothing beyond the cut may be scored at all."""
    pairs: dict[str, list[tuple[int, int]]] = {}
    out = Tail(bootstrap, {topic: ScoredTransaction}, from_beginning=True)

    def below_cut() -> dict[str, list[tuple[int, int]]]:
        if load_stopped:
            return {a: sorted(pairs.get(a, [])) for a in set(acked) | set(pairs)}
        return {a: sorted(p for p in pairs.get(a, []) if p[0] < n) for a, n in acked.items()}

    def collect() -> bool:
        for _topic, row in out.poll(0.5, 5000):
            assert isinstance(row, ScoredTransaction)
            pairs.setdefault(row.account_id, []).append((row.account_seq, row.account_txn_count))
        return sum(map(len, below_cut().values())) >= sum(acked.values())

    try:
        until(collect, timeout_s, f"{sum(acked.values())} scored transactions", 0)
        collect()  # a duplicate would still be in flight
    finally:
        out.close()
    assert out.decode_errors == []
    scored = below_cut()
    wrong = {account: (acked.get(account, 0), len(got)) for account, got in scored.items()
             if got != [(seq, seq + 1) for seq in range(acked.get(account, 0))]}
    assert not wrong, (
        f"{len(wrong)} accounts not scored exactly once with a running count (acknowledged, "
        f"scored), e.g. {sorted(wrong.items())[:5]}")
