"""The load generator on the real broker: a run sends its profile's whole integral, however
short, and the ledger holds exactly what the broker acknowledged."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamctl.loadgen import Ledger, LoadSpec, run_load
from streamctl.profiles import RateProfile
from tests.support.kafka import read_committed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.mark.parametrize(("profile", "duration_s", "records"), [
    (RateProfile("constant", 4000), 100 / 4000, 100),  # a burst shorter than two ticks
    (RateProfile("ramp", 100, 300, 0, 1), 1.5, 350),  # 200 over the ramp, 150 after it
])
def test_a_run_sends_what_its_profile_is_due_by_its_end(
        bootstrap_servers: str, new_topic: Callable[..., str], profile: RateProfile,
        duration_s: float, records: int) -> None:
    topic = new_topic(partitions=2)
    ledger = run_load(LoadSpec(bootstrap_servers, topic, profile, duration_s), Ledger(10_000))
    assert (ledger.acked, ledger.failed) == (records, 0)
    assert len(read_committed(bootstrap_servers, topic)) == records
