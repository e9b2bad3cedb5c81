"""Arrival-rate profiles: records/s over simulated time, and their exact integral.

Owns the load a scenario offers to the first job of a pipeline. A profile is piecewise
constant on a 1 s grid (`rates[i]` holds during [i, i+1) s), so `produced(t)` is exact and
cheap, and a seeded noisy profile is reproducible. Neighbours: `model.ExternalTopic` reads
`produced`; `measures` reads `rate_at` for the backlog target.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate


@dataclass(frozen=True)
class Profile:
    name: str
    rates: tuple[float, ...]
    """records/s during each second of the run; the last value holds after the end."""
    change_s: float
    """When the load change under test begins (convergence is timed from here)."""
    cumulative: tuple[float, ...] = field(init=False, repr=False, compare=False)
    """Records produced before each whole second (one more entry than `rates`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cumulative", (0.0, *accumulate(self.rates)))

    def rate_at(self, t_s: float) -> float:
        i = min(int(t_s), len(self.rates) - 1)
        return self.rates[max(i, 0)]

    def produced(self, t_s: float) -> float:
        """Records produced in [0, t_s)."""
        if t_s <= 0:
            return 0.0
        cumulative = self.cumulative
        i = int(t_s)
        if i >= len(self.rates):
            return cumulative[-1] + self.rates[-1] * (t_s - len(self.rates))
        return cumulative[i] + self.rates[i] * (t_s - i)


def steps(name: str, seconds: int, points: list[tuple[float, float]], change_s: float) -> Profile:
    """Piecewise constant: (from second, rate) pairs, the first at 0."""
    rates, current, pending = [], 0.0, sorted(points)
    for second in range(seconds):
        while pending and pending[0][0] <= second:
            current = pending.pop(0)[1]
        rates.append(current)
    return Profile(name, tuple(rates), change_s)


def step(base: float, factor: float, at_s: int, seconds: int) -> Profile:
    return steps(f"step {factor:g}x", seconds, [(0, base), (at_s, base * factor)], at_s)


def ramp(base: float, top: float, from_s: int, to_s: int, seconds: int) -> Profile:
    """Linear from `base` to `top` between `from_s` and `to_s`, flat around it."""
    def rate(second: int) -> float:
        if second < from_s:
            return base
        if second >= to_s:
            return top
        return base + (top - base) * (second - from_s) / (to_s - from_s)
    return Profile(f"ramp {base:g}->{top:g}/s", tuple(rate(s) for s in range(seconds)), from_s)


def spike(base: float, top: float, at_s: int, length_s: int, seconds: int) -> Profile:
    return steps(f"spike {top / base:g}x for {length_s} s", seconds,
                 [(0, base), (at_s, top), (at_s + length_s, base)], at_s)


def noisy(mean: float, relative_sd: float, seconds: int, seed: int,
          change_s: float = 0.0) -> Profile:
    """Steady load with independent Gaussian noise per second (never below zero); there is no
    change, so `change_s` only says from when convergence is timed."""
    rng = random.Random(seed)
    rates = tuple(max(0.0, rng.gauss(mean, mean * relative_sd)) for _ in range(seconds))
    return Profile(f"noisy {mean:g}/s ±{relative_sd:.0%}", rates, change_s)


@dataclass(frozen=True)
class Crowd:
    """A flash crowd: `factor` × the load for `length_s` from `at_s` (seconds of the run)."""

    at_s: int
    length_s: int
    factor: float


def smooth_day(phase: float) -> float:
    """0 at the day's start, 1 half a day later: a cosine, raised to 1.5 so the night is longer
    and the peak sharper."""
    return (0.5 - 0.5 * math.cos(2 * math.pi * phase)) ** 1.5


def office_day(phase: float) -> float:
    """Quiet until a third of the day, then up to 80 % within about ten minutes (the office
    opens), to the peak half a day in, and back down over the last fifth of the day."""
    opening = _logistic((phase - 1 / 3) * 86_400 / 150)
    closing = _logistic((0.8 - phase) * 86_400 / 1800)
    return opening * closing * (0.8 + 0.2 * smooth_day(phase))


def _logistic(x: float) -> float:
    return 1 / (1 + math.exp(-max(-60.0, min(60.0, x))))


def day_shaped(night: float, peak: float, days: int, day_s: int, *, prefix_s: int,
               relative_sd: float, drift_per_day: float, crowd: Crowd | None, seed: int,
               shape: Callable[[float], float] = smooth_day) -> Profile:
    """`days` days of `day_s` seconds after `prefix_s` seconds at the night's rate: each day
    runs from `night` records/s to `peak` by `shape` of the day's phase (0 → 0, 1 at the
    peak), the whole scaled by 1 + `drift_per_day` per day (a slow growth), with Gaussian
    noise per second and an optional flash crowd; reproducible from `seed`."""
    rng = random.Random(seed)

    def rate(second: int) -> float:
        t = max(0, second - prefix_s)
        level = ((night + (peak - night) * shape((t % day_s) / day_s))
                 * (1 + drift_per_day * t / day_s))
        if crowd is not None and crowd.at_s <= second < crowd.at_s + crowd.length_s:
            level *= crowd.factor
        return max(0.0, level * (1 + rng.gauss(0, relative_sd)))

    seconds = prefix_s + days * day_s
    return Profile(f"{days} days of {night:g}-{peak:g}/s", tuple(rate(s) for s in range(seconds)),
                   prefix_s)
