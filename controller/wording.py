"""How numbers read in reason sentences and status lines: 12 400, 310, 3.5, ∞, 71%.

Owns only formatting, so `policy`, `judgement`, `topology` and `report` word figures alike.
"""

from __future__ import annotations

import math


def num(value: float) -> str:
    """12 400, 310, 3.5, ∞ — readable at a glance in a log line."""
    if math.isinf(value):
        return "∞"
    if abs(value) >= 100:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.3g}"


def pct(ratio: float) -> str:
    return "∞%" if math.isinf(ratio) else f"{ratio * 100:.0f}%"


def units(count: int) -> str:
    return f"{count} unit" if count == 1 else f"{count} units"
