"""The query port's contract (tests/runtime_query_contract.py) against the in-memory fake the
protocol tests use (`runtime.fakes.FakeQuery`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.fakes import FakeQuery
from tests.runtime_query_contract import CONTRACT, QueryHarness

DESIRED = DesiredState(epoch=0, input_parallelism=2, state_partitions=2,
                       max_offsets_per_trigger=100, shed_fraction=0.0, udf_version="",
                       input_topic="in", output_topic="out", executors=0)


class FakeHarness:
    desired = DESIRED
    other_output_topic = "out-2"
    timeout_s = 1.0

    def __init__(self) -> None:
        self.query = FakeQuery(DESIRED, auto_commit=False)

    def feed(self) -> None:
        self.query.commit()


@pytest.mark.parametrize("check", CONTRACT, ids=lambda c: c.__name__)
def test_the_fake_query_keeps_the_port_contract(check: Callable[[QueryHarness], None]) -> None:
    check(FakeHarness())
