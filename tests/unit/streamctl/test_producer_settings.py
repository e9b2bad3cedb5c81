"""Every producer the project builds is idempotent, acks=all, with one request in flight per
broker: with more, a producer's first records to a partition whose leader is just coming up
can be reported delivered and be in no log (KAFKA-15591, `docs/guarantees.md`)."""

from __future__ import annotations

import re
from pathlib import Path

from streamctl.loadgen import producer_config
from streamctl.security.kafka import IDEMPOTENT

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("controller", "streaming_jobs", "schemas", "streamctl", "bench")
_PRODUCER_CALL = re.compile(r"\bProducer\((?P<args>.{0,200})", re.DOTALL)


def test_the_shared_producer_settings_keep_one_request_in_flight() -> None:
    assert IDEMPOTENT["max.in.flight.requests.per.connection"] == 1
    assert (IDEMPOTENT["enable.idempotence"], IDEMPOTENT["acks"]) == (True, "all")


def test_the_load_generators_producer_uses_them() -> None:
    assert producer_config("localhost:9092").items() >= IDEMPOTENT.items()


def test_every_producer_the_product_constructs_is_built_from_them() -> None:
    """A `Producer(` outside the tests passes `IDEMPOTENT` (or the load generator's config,
    which does): a new producer cannot quietly go back to librdkafka's five in flight."""
    unbuilt = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for call in _PRODUCER_CALL.finditer(path.read_text()):
                if not re.search(r"IDEMPOTENT|producer_config\(", call["args"]):
                    unbuilt.append(f"{path.relative_to(ROOT)}: Producer({call['args'][:60]}")
    assert not unbuilt, unbuilt
