"""How far behind its metrics topic the controller reads, and whether it may judge.

Owns the controller's horizon: what it has read was published before `now − behind`, so a
query's silence counts up to the horizon, not up to the controller's clock (its own delay is
not the query's). Past `max_input_delay_s` its view is too old to judge at all: it judges
nothing until it is back within half of that (a margin, so a controller hovering at the bound
does not flap), and says when that changes. Neighbours: `cycle` (reads the source's delay each
cycle, asks `judging`), `ports.MetricsSource.behind_ms` (the delay itself).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Behind:
    max_input_delay_s: float
    ms: int = 0
    """How far behind the controller read at the last cycle, in milliseconds."""
    judging: bool = True
    _reported: bool = True

    def read(self, behind_ms: int) -> None:
        self.ms = max(0, behind_ms)
        limit_ms = self.max_input_delay_s * 1000
        self.judging = self.ms <= (limit_ms / 2 if not self.judging else limit_ms)

    def horizon(self, now_ms: int) -> int:
        """The time up to which the controller has read what was published."""
        return now_ms - self.ms

    def change(self) -> str | None:
        """What changed since the last call, in words; None when nothing did."""
        if self.judging == self._reported:
            return None
        self._reported = self.judging
        if self.judging:
            return (f"the controller is {self.ms / 1000:.1f} s behind its metrics again: "
                    "judging the queries again")
        return (f"the controller is {self.ms / 1000:.1f} s behind its metrics, more than "
                f"max_input_delay_s={self.max_input_delay_s:g}: judging no query (none is "
                "taken for lost, hung or due a change) until it has caught up; fewer "
                "queries per controller or a faster host would keep it up")
