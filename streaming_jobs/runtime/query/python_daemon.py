"""PySpark's Python daemon (`spark.python.daemon.module`), with the garbage collection each
worker runs after every task made cheap.

A reused Python worker calls `gc.collect()` after each task (`pyspark.daemon`): a full
collection, which walks every object the worker holds. Once pyarrow, pandas and the job's
modules are imported that is some 80 000 objects, 28 ms a task on an idle core, and it was
38 % of the workers' CPU in a profile of a job at 150 records/s on a 2-core machine
(`docs/restarts.md`, "Between tasks"). Freezing what survives that collection
(`gc.freeze`: the imported modules and the worker's other long-lived objects) leaves each
later collection only what the last task allocated and kept.

What freezing costs: an object that outlived a task and later becomes part of a reference
cycle is never freed (objects freed by their reference count still are). A worker's
survivors are its modules and their caches; a task's rows and frames are gone by then.

Why not import the job's modules in the daemon, so that every fork is born warm and frozen:
see `worker_pool` (pyarrow starts threads when imported; a fork of a process with threads may
deadlock).

Neighbours: `session` (names this module in the Spark settings). Spark starts it as
`python -m`, on every machine that runs Python tasks, so it imports only the standard
library and PySpark.
"""

from __future__ import annotations

import gc

from pyspark import daemon


class _CollectThenFreeze:
    """What `pyspark.daemon` calls `gc` (it calls only `gc.collect()`, after each task)."""

    @staticmethod
    def collect(generation: int = 2) -> int:
        found = gc.collect(generation)
        gc.freeze()
        return found


def main() -> None:
    daemon.gc = _CollectThenFreeze  # type: ignore[assignment]
    daemon.manager()


if __name__ == "__main__":
    main()
