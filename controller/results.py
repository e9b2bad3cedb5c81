"""The typed outcomes of the pure core, shared by `model`, `policy` and `loop`.

`NotReady` is a normal result (window not full, stabilising after a change), never an
exception. `Hold` and `Scale` are the policy's verdicts; each carries its reason as one
readable sentence and its figures as data, which `loop` writes to the decision log as-is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

INPUT_PARALLELISM = "input_parallelism"
"""The one knob of the walking skeleton: Spark partitions the Kafka source reads with."""


@dataclass(frozen=True, slots=True)
class NotReady:
    """Not enough trustworthy data to decide yet."""

    reason: str
    action: str = "not_ready"


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep the current configuration. `action` is 'hold', or 'cannot_help' when the query is
    backlogged but the knob is already at its limit."""

    reason: str
    figures: Mapping[str, float] = field(default_factory=dict)
    action: str = "hold"


@dataclass(frozen=True, slots=True)
class Scale:
    """Change one knob of one query from `current` to `target`."""

    parameter: str
    current: int
    target: int
    reason: str
    figures: Mapping[str, float]

    @property
    def action(self) -> str:
        return "scale_up" if self.target > self.current else "scale_down"


Verdict = NotReady | Hold | Scale
