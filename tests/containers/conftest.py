"""The container tier: docker-compose.yml run for real, in containers, on this machine.

`compose_stack` (one per module) is `bench.compose.stack.up`: it starts the engine if none
runs, builds the base, the project image and the stand-ins, brings up every service that runs
the project image plus the stand-ins, and takes it all down, volumes included, on the way out.
Run with `./dev test-containers`; `./dev test` leaves this directory out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bench.compose.stack import Compose, up


@dataclass
class Timings:
    """What the check measured, printed at the end."""

    figures: dict[str, float]

    def report(self) -> str:
        return "\n".join(f"  {name:<36} {seconds:7.1f} s" for name, seconds in self.figures.items())


@pytest.fixture(scope="module")
def timings() -> Iterator[Timings]:
    t = Timings({})
    yield t
    print("\ncontainer check timings:\n" + t.report())


@pytest.fixture(scope="module")
def compose_stack(timings: Timings) -> Iterator[Compose]:
    with up(timings.figures) as compose:
        yield compose
