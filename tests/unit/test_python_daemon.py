"""The jobs' Python daemon's collection after a task (`python_daemon`)."""

from __future__ import annotations

import gc

from streaming_jobs.runtime.query import python_daemon


def test_the_collection_after_a_task_frees_cycles_then_freezes_the_survivors() -> None:
    class Node:
        def __init__(self) -> None:
            self.peer: Node | None = None

    survivor, cycle = Node(), Node()
    cycle.peer = cycle
    del cycle
    try:
        found = python_daemon._CollectThenFreeze.collect()
        assert found >= 1  # the cycle was freed, not frozen
        # Frozen objects are out of every generation a collection walks.
        assert not any(o is survivor for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_pyspark_calls_the_daemons_gc_only_for_its_collection() -> None:
    """The daemon replaces what `pyspark.daemon` calls `gc`: if PySpark ever calls anything
    else on it, this fails here instead of in a worker."""
    import inspect

    from pyspark import daemon

    source = inspect.getsource(daemon)
    calls = {line.strip() for line in source.splitlines() if "gc." in line}
    assert calls == {"gc.collect()"}, calls
