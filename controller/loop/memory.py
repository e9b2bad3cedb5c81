"""What the loop remembers of each query from one cycle to the next: one record per query.

Owns `QueryMemory` — the query's control state (what was sent and when, cooldowns, effect
checks), its last verdict, its last model, what that model carries into the next one, what it
derived from the window's records, its load's repeating pattern and its want of the shared
cluster's cores —
so a stage reads and writes one record instead of six dictionaries kept in step. The
windows of samples are `core.window`'s, the instance table `core.failover`'s. Neighbours:
`cycle` (every stage), `leading` (resumes and hands over the control states).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.core.cluster import Demand, Taken
from controller.core.memo import Memo
from controller.core.model import QueryModel, Remembered
from controller.core.results import Verdict
from controller.core.season import Season
from controller.core.state import ControlState


@dataclass
class QueryMemory:
    """One query, as the loop left it at the end of the last cycle."""

    state: ControlState = field(default_factory=ControlState)
    verdict: Verdict | None = None
    """The last verdict: a non-scaling one is logged only when its kind changes."""
    model: QueryModel | None = None
    """The last model; None while the query is not ready, lost or down."""
    remembered: Remembered = field(default_factory=Remembered)
    derived: Memo = field(default_factory=Memo)
    """What the model derived from the records still in the window (`core.memo`)."""
    season: Season | None = None
    """Its arrival rate over the periods it may repeat with (`core.season`); made on the
    first model when the controller anticipates."""
    demand: Demand | None = None
    """What it wants of the shared Spark cluster's free cores, as its last verdict named
    (`sharing`); None: nothing, or no cluster divided."""
    taken: Taken | None = None
    """The cores its last applied executors request took: counted as asked until a reading
    begun after its ack (`sharing`)."""
    overload_recorded_ms: int = 0
    """When a decision of its own was last recorded: an overload recorded none for long is
    (`cycle._note`)."""
    followed_slot: int | None = None
    """While another instance leads it: the `shards.follow_slot` it was last modelled in."""


class Memory(dict[str, QueryMemory]):
    """Every query's record, made on first use."""

    def of(self, query_id: str) -> QueryMemory:
        found = self.get(query_id)
        if found is None:
            found = self[query_id] = QueryMemory()
        return found
