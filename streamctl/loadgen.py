"""Load generator: produces the jobs' input at a rate profile and keeps a ledger.

Sensor readings (`SensorReading`, the sensor-averages job), card transactions
(`CardTransaction`, the fraud-detection job; generator in `cards`) or JSON clicks (the example
pipeline, `examples/clickstream`; generator in `clicks`). The ledger (a `ledger.AckedLedger`)
holds what the broker acknowledged (not what was merely attempted), so a test or the demo can
account for every record in the job's output: per sensor and event-time window, the count and
the sum of sequence numbers; per account, the transactions and the highest account_seq; the
click ids.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, Message, Producer

from schemas import CardTransaction, Codec, SensorReading, codec_for
from streamctl.cards import CardEvents, CardLedger
from streamctl.clicks import ClickEvents, ClickLedger
from streamctl.clicks import encode as encode_click
from streamctl.ledger import AckedLedger
from streamctl.profiles import RateProfile, Rates
from streamctl.security.kafka import IDEMPOTENT, PLAINTEXT, KafkaSecurity, client_config

_TICK_S = 0.02


@dataclass
class Ledger(AckedLedger[SensorReading]):
    """Acknowledged records, aggregated per (sensor_id, window_start_ms)."""

    window_ms: int
    counts: Counter[tuple[str, int]] = field(default_factory=Counter)
    seq_sums: Counter[tuple[str, int]] = field(default_factory=Counter)

    def _keep(self, reading: SensorReading) -> None:
        key = (reading.sensor_id, reading.event_time_ms - reading.event_time_ms % self.window_ms)
        self.counts[key] += 1
        self.seq_sums[key] += reading.seq


L = TypeVar("L", bound=AckedLedger[Any])
"""The ledger `run_load` counts into and returns: `Ledger` for readings, `CardLedger` for
cards, `ClickLedger` for clicks."""

EVENT_TYPES = {"sensor": "sensor-readings", "card": "card-transactions", "click": "clicks"}
"""Event type → its default topic."""


@dataclass(frozen=True)
class LoadSpec:
    """What to produce: where, how fast, over which keys."""

    bootstrap_servers: str
    topic: str
    profile: Rates
    duration_s: float
    sensors: int = 50
    hot_key_share: float = 0.0  # share of records that go to sensor 0 (skew); 0 = uniform
    start_seq: int = 0
    window_ms: int = 10_000
    event_type: str = "sensor"
    """sensor (SensorReading, keys `sensors`), card (CardTransaction, keys `accounts`) or click
    (JSON, keys `users`)."""
    accounts: int = 200
    users: int = 200
    low_priority_share: float = 0.3
    """Cards only: share of transactions with priority 0 (sheddable)."""
    security: KafkaSecurity = PLAINTEXT
    """How the producer authenticates (STREAMCTL_KAFKA_*)."""

    def __post_init__(self) -> None:
        if self.event_type not in EVENT_TYPES:
            raise ValueError(f"unknown event type {self.event_type!r}; use "
                             f"{', '.join(EVENT_TYPES)}")
        if self.event_type == "card":  # refuses a bad account count or share up front
            CardEvents(self.accounts, self.hot_key_share, self.low_priority_share)
        if self.event_type == "click":
            ClickEvents(self.users, self.hot_key_share)


def producer_config(bootstrap_servers: str,
                    security: KafkaSecurity = PLAINTEXT) -> dict[str, object]:
    return client_config(bootstrap_servers, security, **IDEMPOTENT,
                         **{"linger.ms": 5, "log_level": 3})


def _pick_sensor(rng: random.Random, spec: LoadSpec) -> str:
    if spec.hot_key_share and rng.random() < spec.hot_key_share:
        return "sensor-000"
    return f"sensor-{rng.randrange(spec.sensors):03d}"


EventMaker = Callable[[int, int], tuple[str, bytes, Any]]
"""(event time ms, global seq) → (key, encoded value, what the ledger records once acked)."""


def event_maker(spec: LoadSpec, rng: random.Random) -> EventMaker:
    run_tag = f"{rng.getrandbits(32):08x}-"
    if spec.event_type == "card":
        cards, card_codec = (CardEvents(spec.accounts, spec.hot_key_share,
                                        spec.low_priority_share, run_tag=run_tag),
                             codec_for(CardTransaction))

        def card(now_ms: int, _seq: int) -> tuple[str, bytes, Any]:
            txn = cards.make(rng, now_ms)
            return txn.account_id, card_codec.encode(txn), txn
        return card
    if spec.event_type == "click":
        clicks = ClickEvents(spec.users, spec.hot_key_share, run_tag=run_tag)

        def click(now_ms: int, _seq: int) -> tuple[str, bytes, Any]:
            user, event = clicks.make(rng, now_ms)
            return user, encode_click(event), event
        return click
    reading_codec: Codec[SensorReading] = codec_for(SensorReading)

    def reading(now_ms: int, seq: int) -> tuple[str, bytes, Any]:
        r = SensorReading(_pick_sensor(rng, spec), now_ms, rng.uniform(-10, 40), seq)
        return r.sensor_id, reading_codec.encode(r), r
    return reading


def new_ledger(spec: LoadSpec) -> Ledger | CardLedger | ClickLedger:
    if spec.event_type == "card":
        return CardLedger()
    return ClickLedger() if spec.event_type == "click" else Ledger(spec.window_ms)


def run_load(
    spec: LoadSpec,
    ledger: L,
    stop: threading.Event | None = None,
    on_tick: Callable[[float, int], None] | None = None,
) -> L:
    """Produce until `duration_s` elapses or `stop` is set; flush; return the ledger."""
    stop = stop or threading.Event()
    producer = Producer(producer_config(spec.bootstrap_servers, spec.security))
    rng = random.Random(spec.start_seq)
    make = event_maker(spec, rng)
    seq = spec.start_seq
    started = time.monotonic()

    def delivered(record: Any) -> Callable[[KafkaError | None, Message], None]:
        def callback(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                ledger.record(record)
            else:
                ledger.refused()
        return callback

    while not stop.is_set():
        # The last tick produces what is due by the end, so a run of `duration_s` sends the
        # profile's whole integral: a burst of 0.025 s at 4 000/s is its 100 records, not
        # what the one or two ticks before its end happened to catch (often none).
        elapsed = min(time.monotonic() - started, spec.duration_s)
        due = int(spec.profile.expected_by(elapsed)) - (seq - spec.start_seq)
        now_ms = int(time.time() * 1000)
        for _ in range(max(0, due)):
            key, value, record = make(now_ms, seq)
            _produce(producer, spec.topic, key, value, delivered(record))
            seq += 1
        producer.poll(0)
        if on_tick:
            on_tick(elapsed, seq - spec.start_seq)
        if elapsed >= spec.duration_s:
            break
        stop.wait(_TICK_S)
    producer.flush(30)
    return ledger


def _produce(producer: Producer, topic: str, key: str, value: bytes,
             callback: Callable[[KafkaError | None, Message], None]) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value, on_delivery=callback)
            return
        except BufferError:
            # The local queue is full: let deliveries drain rather than drop the record.
            producer.poll(0.05)


def add_produce_command(groups: argparse._SubParsersAction) -> None:
    p = groups.add_parser(
        "produce",
        help="generate sensor readings, card transactions or clicks at a rate profile",
        description="Produce SensorReading (sensor-averages job) or CardTransaction "
                    "(fraud-detection job) records, Avro, or JSON clicks (the example "
                    "pipeline), to the job's input topic.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    from streamctl.settings import add_bootstrap_option

    add_bootstrap_option(p)
    p.add_argument("--event-type", default="sensor", choices=list(EVENT_TYPES),
                   help="sensor: readings for sensor-averages; card: transactions for "
                        "fraud-detection; click: JSON clicks for click-enrich")
    p.add_argument("--topic", default=None,
                   help="input topic of the job (default sensor-readings, "
                        "card-transactions or clicks, by event type)")
    p.add_argument("--profile", default="step", choices=["constant", "step", "ramp", "spike"],
                   help="shape of the input rate over time")
    p.add_argument("--rate", type=float, default=150.0, help="base rate, records/s")
    p.add_argument("--peak-rate", type=float, default=900.0,
                   help="rate after the step / at the end of the ramp / during the spike")
    p.add_argument("--change-at-s", type=float, default=30.0,
                   help="seconds after start when the step, ramp or spike begins")
    p.add_argument("--change-until-s", type=float, default=60.0,
                   help="end of the ramp or spike, seconds after start")
    p.add_argument("--duration-s", type=float, default=120.0, help="how long to produce")
    p.add_argument("--sensors", type=int, default=50, help="number of distinct sensor keys")
    p.add_argument("--accounts", type=int, default=200,
                   help="number of distinct card accounts (event type card)")
    p.add_argument("--users", type=int, default=200,
                   help="number of distinct users (event type click)")
    p.add_argument("--low-priority-share", type=float, default=0.3,
                   help="share of card transactions with priority 0, the only ones load "
                        "shedding may drop (event type card)")
    p.add_argument("--hot-key-share", type=float, default=0.0,
                   help="share of records sent to one hot sensor or account (0 = uniform)")
    p.set_defaults(handler=_produce_command)


def _produce_command(args: argparse.Namespace) -> int:
    end = args.change_until_s if args.profile in ("ramp", "spike") else float("inf")
    profile = RateProfile(args.profile, args.rate, args.peak_rate, args.change_at_s, end)
    topic = args.topic or EVENT_TYPES[args.event_type]
    from streamctl.settings import kafka_security

    try:
        spec = LoadSpec(args.bootstrap_servers, topic, profile, args.duration_s, args.sensors,
                        args.hot_key_share, event_type=args.event_type,
                        accounts=args.accounts, users=args.users,
                        low_priority_share=args.low_priority_share,
                        security=kafka_security())
    except ValueError as exc:
        print(f"produce: {exc}", file=sys.stderr)
        return 2
    last_print = [0.0]

    def progress(elapsed: float, sent: int) -> None:
        if elapsed - last_print[0] >= 1.0:
            last_print[0] = elapsed
            print(f"\r{elapsed:6.1f}s  rate {profile.rate_at(elapsed):7.0f}/s  sent {sent:9d}",
                  end="", flush=True)

    ledger = new_ledger(spec)
    run_load(spec, ledger, on_tick=progress)
    accounts = (f" over {len(ledger.snapshot())} accounts" if isinstance(ledger, CardLedger)
                else "")
    print(f"\nacknowledged {ledger.acked} records{accounts} to {topic}, {ledger.failed} failed")
    return 0 if ledger.failed == 0 else 1
