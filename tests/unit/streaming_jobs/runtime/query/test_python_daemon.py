"""The jobs' Python daemon's collection after a task (`python_daemon`)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

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


def _preload_in_a_fresh_interpreter(**env: str) -> dict[str, object]:
    """`preload` run in a new interpreter (it imports and freezes for good), and what
    followed: its answer, the threads, the modules imported, the objects frozen."""
    script = (
        "import gc, json, sys\n"
        "from streaming_jobs.runtime.query import python_daemon as d\n"
        "why = d.preload()\n"
        "print(json.dumps({'why': why, 'threads': d._threads(), 'frozen': gc.get_freeze_count(),"
        " 'imported': [m for m in d.PRELOADED if m in sys.modules]}))\n")
    clean = {k: v for k, v in os.environ.items() if k not in python_daemon.NO_THREADS}
    done = subprocess.run([sys.executable, "-c", script], env={**clean, **env},
                          capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(done.stdout))


def test_preloading_imports_every_workers_modules_freezes_them_and_starts_no_thread() -> None:
    after = _preload_in_a_fresh_interpreter()
    assert after["why"] is None
    assert after["imported"] == list(python_daemon.PRELOADED)
    assert after["threads"] == 1  # what makes a fork of the daemon safe
    assert isinstance(after["frozen"], int) and after["frozen"] > 10_000


def test_a_thread_setting_of_the_users_own_keeps_the_daemon_plain() -> None:
    """Preloading would start OpenBLAS's threads: the daemon imports nothing instead."""
    after = _preload_in_a_fresh_interpreter(OPENBLAS_NUM_THREADS="4")
    assert after["why"] == "OPENBLAS_NUM_THREADS is '4', not '1'"
    assert isinstance(after["imported"], list)
    assert not {"pyarrow", "pandas"} & set(after["imported"]) and after["threads"] == 1
