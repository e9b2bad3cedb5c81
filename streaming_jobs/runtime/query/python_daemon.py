"""PySpark's Python daemon (`spark.python.daemon.module`), whose workers are born with the
modules every task imports, and whose collection after a task is cheap.

**Born warm.** Spark forks a Python worker from this daemon for each task slot it fills, and
PySpark's own daemon imports nothing a task needs: every new worker imports pyarrow, pandas,
PySpark's Arrow serializers and the runtime's decode step itself, about half a second of CPU
each on this 2-core machine, and a restart from 2 to 12 tasks forks 24 of them
(`worker_pool`). This daemon imports them once, before it forks (`preload`), so a fork
inherits them as copy-on-write pages.

PySpark imports them after the fork on purpose: pandas (through OpenBLAS) and pyarrow (its
jemalloc) start threads when imported, and a process forked from one with threads may
deadlock on a lock another thread held. `preload` starts none: it sets the two libraries'
own switches (`OPENBLAS_NUM_THREADS=1`: a worker runs one task, so BLAS threads would only
contend; jemalloc without its background thread: pyarrow's default pool is mimalloc anyway),
and checks `/proc/self/task` afterwards. Where a switch is set otherwise, or a thread started
all the same, the daemon runs as PySpark's does: it imports nothing (a thread found after the
imports re-executes the daemon without them, before it has forked anything).

**Cheap collection.** A reused worker calls `gc.collect()` after each task (`pyspark.daemon`):
a full collection, which walks every object the worker holds. With pyarrow, pandas and the
job's modules imported that is some 80 000 objects, 28 ms a task on an idle core, and it was
38 % of the workers' CPU in a py-spy profile of a job at 150 records/s (`docs/restarts.md`,
"Between tasks", says what this daemon does about it). Freezing what survives that collection
(`gc.freeze`: the imported modules and the worker's other long-lived objects) leaves each
later collection only what the last task allocated and kept; the daemon freezes what it
imported before it forks. What freezing costs: an object that outlived a task and later becomes
part of a reference cycle is never freed (objects freed by their reference count still are).

Neighbours: `session` (names this module in the Spark settings), `worker_pool` (forks the
workers of a larger restart ahead of it). Spark starts it as `python -m`, on every machine
that runs Python tasks (the jobs' image installs this package on every one), so at its
top it imports only the standard library, PySpark and `worker_pool` (which imports nothing
else at run time).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

from pyspark import daemon

from streaming_jobs.runtime.query.worker_pool import INPUT_STEP

PRELOADED = ("pyarrow", "pandas", "pyspark.sql.pandas.serializers", "pyspark.worker",
             INPUT_STEP)
"""What every worker of a job imports before its first record: the Arrow serializers that
`mapInArrow` and pandas functions run through, with pyarrow and pandas, PySpark's worker
itself, and the runtime's decode step (fastavro, the schemas). A job's own modules are its
own: `worker_pool` imports them in the workers of a larger restart ahead of it."""

NO_THREADS = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
"""The settings under which importing `PRELOADED` starts no thread."""

MODULE = "streaming_jobs.runtime.query.python_daemon"
"""This module, as Spark starts it (`python -m`)."""

PLAIN = "--plain"
"""The argument of the daemon re-executed without preloading (Spark passes none)."""


def preload() -> str | None:
    """Import `PRELOADED` and freeze it; None once done, or why not (nothing imported)."""
    threads = _threads()
    if threads is None:
        return "its threads cannot be counted here (no /proc)"
    if threads > 1:
        return f"{threads} threads before any import"
    for name, value in NO_THREADS.items():
        if os.environ.setdefault(name, value) != value:
            return f"{name} is {os.environ[name]!r}, not {value!r}"
    for module in PRELOADED:
        importlib.import_module(module)
    gc.collect()
    gc.freeze()
    return None


def _threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


class _CollectThenFreeze:
    """What `pyspark.daemon` calls `gc` (it calls only `gc.collect()`, after each task)."""

    @staticmethod
    def collect(generation: int = 2) -> int:
        found = gc.collect(generation)
        gc.freeze()
        return found


def main(argv: list[str] = sys.argv) -> None:
    not_preloaded = ("a thread started while preloading" if PLAIN in argv[1:]
                     else preload())
    if not_preloaded is None and _threads() != 1:
        # An import started a thread after all: start again with nothing imported, before
        # anything was forked or written to Spark.
        os.execv(sys.executable, [sys.executable, "-m", MODULE, PLAIN])
    if not_preloaded is not None:
        print(f"streamctl python daemon: workers import their modules themselves "
              f"({not_preloaded})", file=sys.stderr)
    daemon.gc = _CollectThenFreeze  # type: ignore[assignment]
    daemon.manager()


if __name__ == "__main__":
    main()
