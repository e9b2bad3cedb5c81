"""Which share of the fleet a query belongs to, when several controller instances divide it.

The queries are divided into a fixed number of shards (the lease topic's partitions); each
shard is led by exactly one instance at a time, fenced on its own,
so one query's decisions never come from two instances. A query's shard is a stable hash of
its id: every instance, whatever its start or version, puts a query in the same shard, and a
query keeps its shard for its whole life (no table to agree on, nothing to move when a query
appears). Pure; `loop.leading` asks it which queries the shards it holds cover,
`kafka.lease` which transactional id fences a shard.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from schemas import Decision

NO_QUERY = ""
"""The query id of the records about the controller itself (a takeover, its lateness)."""


def shard_of(query_id: str, shards: int) -> int:
    """The query's shard in [0, shards): CRC-32 of its id, the same in every process (Python's
    own `hash` of a string is salted per process)."""
    return zlib.crc32(query_id.encode()) % shards


def read_partitions(held: Iterable[int], shards: int, partitions: int) -> frozenset[int] | None:
    """The metrics topic's partitions that carry the queries of the `held` shards, or None when
    an instance must read all of them. A job keys its metrics by query id, and its producer's
    partitioner (librdkafka's `consistent_random`) puts a key in partition CRC-32 % partitions,
    the hash `shard_of` takes: when the partitions are a multiple of the shards, partition p
    carries only shard p % shards. One shard: every instance reads everything, so that the one
    that waits to lead is ready at once."""
    if shards == 1 or partitions % shards:
        return None
    wanted = frozenset(held)
    return frozenset(p for p in range(partitions) if p % shards in wanted)


def transactional_id(group_id: str, shard: int, shards: int) -> str:
    """The transactional id whose holder may write for a shard: the group's own name when
    there is one shard (as before there were shards), else `<group>.shard-<k>`."""
    return group_id if shards == 1 else f"{group_id}.shard-{shard}"


def follow_slot(query_id: str, now_ms: int, interval_ms: int) -> int:
    """The slot of `interval_ms` that `now_ms` falls in for this query: a query it follows is
    modelled once per slot, and each query's slots are offset by its hash, so the followed
    queries' models are spread over the cycles instead of all falling due at once."""
    return (now_ms + zlib.crc32(query_id.encode()) % interval_ms) // interval_ms


SHARDS_FIGURE = "shards"
"""A takeover record's figure: how many shards there are."""


def taken_figures(gained: Iterable[int], shards: int) -> dict[str, float]:
    """A takeover record's figures for the shards it took over (`leaders` reads them)."""
    return {SHARDS_FIGURE: float(shards), **{f"shard_{k}": 1.0 for k in gained}}


def leaders(takeovers: Iterable[Decision]) -> tuple[dict[int, str], int]:
    """Each shard's leader by the takeover records, oldest first (the newest naming a shard
    wins), and the shard count of the newest; a record from before shards took shard 0 of
    1."""
    found: dict[int, str] = {}
    shards = 1
    for record in takeovers:
        figures = record.figures
        shards = int(figures.get(SHARDS_FIGURE, 1))
        taken = [int(name.removeprefix("shard_")) for name in figures
                 if name.startswith("shard_")] or [0]
        found |= dict.fromkeys(taken, record.target_value)
    return found, shards


def describe(held: Iterable[int], shards: int) -> str:
    """ "all queries" or "shards 0, 2 of 4", for logs and the decision log."""
    ordered = sorted(held)
    if len(ordered) == shards:
        return "all queries" if shards == 1 else f"all {shards} shards"
    if not ordered:
        return "no shard"
    listed = ", ".join(str(s) for s in ordered)
    return f"shard{'s' if len(ordered) > 1 else ''} {listed} of {shards}"
