"""What a job states it needs, instead of utilisation numbers: written once for the job (its
declaration and options, sent in every metrics record) and the controller (which sizes for the
cheapest configuration that meets it, and says whether it is met).

Both are in seconds, and 0 means "not stated" (the controller's own `policy.catch_up_s`
applies). `controller.core.objectives` owns what each means for a running query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Objectives:
    """A job's stated objectives; every field 0 states none."""

    max_delay_s: float = 0.0
    """Most seconds a record arriving now may wait before its batch commits: behind the
    backlog ahead of it, then for its batch (up to a trigger interval). The controller keeps
    the backlog small enough, and sizes a backlog's drain to fit within it. 0: none stated."""

    drain_within_s: float = 0.0
    """Seconds in which a backlog must be gone (the drain time the controller sizes for, in
    place of its own `policy.catch_up_s`: longer asks for fewer units). 0: none stated."""

    @property
    def stated(self) -> bool:
        return self.max_delay_s > 0 or self.drain_within_s > 0

    def problems(self, trigger_interval_s: float) -> list[str]:
        """What makes these objectives unusable for a query with this trigger interval."""
        found = [f"{name} must be a number >= 0 (0: none stated), got {value}"
                 for name, value in (("max_delay_s", self.max_delay_s),
                                     ("drain_within_s", self.drain_within_s))
                 if not (math.isfinite(value) and value >= 0)]
        if not found and 0 < self.max_delay_s < 2 * trigger_interval_s:
            found.append(
                f"max_delay_s {self.max_delay_s:g} cannot be met with trigger_interval_s "
                f"{trigger_interval_s:g}: a record waits up to a trigger interval for its batch "
                "and the batch takes up to another; state at least twice the trigger interval")
        return found

    @classmethod
    def from_ms(cls, max_delay_ms: int, drain_within_ms: int) -> Objectives:
        """As a metrics record carries them."""
        return cls(max_delay_ms / 1000, drain_within_ms / 1000)


NONE = Objectives()
