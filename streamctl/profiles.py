"""Input-rate profiles for the load generator: pure functions of elapsed seconds.

A profile answers "how many records per second should be produced at time t", and its
integral (what should have been produced by t) is what the generator tracks, so that a slow
tick is caught up instead of lowering the rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class Rates(Protocol):
    """What the load generator plays: a rate at each moment and its integral. `RateProfile`
    is one; a benchmark may bring its own (`bench.day.real` plays a simulated day)."""

    def rate_at(self, t_s: float) -> float: ...

    def expected_by(self, t_s: float) -> float: ...


@dataclass(frozen=True)
class RateProfile:
    """A piecewise rate: `base_per_s`, changing to `peak_per_s` between `start_s` and `end_s`.

    kind: constant | step (peak from start_s on) | ramp (linear base→peak over start_s..end_s,
    peak after) | spike (peak only between start_s and end_s).
    """

    kind: str
    base_per_s: float
    peak_per_s: float = 0.0
    start_s: float = 0.0
    end_s: float = math.inf

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "step", "ramp", "spike"):
            raise ValueError(f"unknown rate profile {self.kind!r}; use constant, step, ramp, spike")
        if self.base_per_s < 0 or self.peak_per_s < 0:
            raise ValueError("rates must be >= 0 records/s")
        if self.kind in ("ramp", "spike") and not self.end_s > self.start_s:
            raise ValueError(f"{self.kind} needs end_s > start_s")

    def rate_at(self, t_s: float) -> float:
        if self.kind == "constant" or t_s < self.start_s:
            return self.base_per_s
        if self.kind == "step":
            return self.peak_per_s
        if self.kind == "spike":
            return self.peak_per_s if t_s < self.end_s else self.base_per_s
        if t_s >= self.end_s:
            return self.peak_per_s
        frac = (t_s - self.start_s) / (self.end_s - self.start_s)
        return self.base_per_s + frac * (self.peak_per_s - self.base_per_s)

    def expected_by(self, t_s: float) -> float:
        """Records that should have been produced by `t_s` (the integral of the rate)."""
        if self.kind == "constant" or t_s <= self.start_s:
            return self.base_per_s * t_s
        before = self.base_per_s * self.start_s
        during_s = min(t_s, self.end_s) - self.start_s
        after_s = max(0.0, t_s - self.end_s)
        if self.kind == "ramp":
            slope = (self.peak_per_s - self.base_per_s) / (self.end_s - self.start_s)
            during = self.base_per_s * during_s + slope * during_s**2 / 2
            return before + during + self.peak_per_s * after_s
        after_rate = self.peak_per_s if self.kind == "step" else self.base_per_s
        return before + self.peak_per_s * during_s + after_rate * after_s
