"""Python workers started ahead of a restart that adds tasks, so its first batch is not cold.

Spark runs every Python task in a worker process forked from its Python daemon, one per
concurrently running task, and keeps it for the next task (`spark.python.worker.reuse`,
idle ones for about a minute). A restart from 2 to 16 tasks therefore forks 14 workers in its
first batch, and each imports the job's modules (pyarrow, the job's package) before it reads a
record: on a 2-core machine that was 5-6 s of a 14 s first batch (`bench.restart`; its latest
figures are in `docs/benchmarks.md`). `warm` does that work while the old query still runs:
one short Spark job of `tasks` tasks that overlap, each importing the modules, so the pool
holds that many warm workers when the restarted query asks for them.

Why not import the modules in the daemon itself (`spark.python.daemon.module`), so every fork
is born warm: pyarrow starts threads when imported, and a fork of a process with threads may
deadlock; PySpark imports the worker module after the fork for that reason.

Neighbours: `lifecycle` (`ElasticQuery.warm_workers`), `owner.Reconfigurer` (calls it before the
quiesce of a restart that raises the parallelism).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from streaming_jobs.api import Job

ARROW_SERIALIZERS = "pyspark.sql.pandas.serializers"
"""What a worker imports to run an Arrow function (mapInArrow, pandas UDFs); pyarrow with
it."""
_PYTHON_NODE = re.compile(
    r"^[\s+\-:~]*(MapInArrow|MapInPandas|FlatMapGroupsIn\w+|FlatMapCoGroupsIn\w+|"
    r"TransformWithStateIn\w+|ArrowEvalPython|BatchEvalPython|\w+InPandasWithState)\b",
    re.MULTILINE)
INPUT_STEP = "streaming_jobs.runtime.query.input"
"""The module of the decode step every query's source tasks run (`input.InputStep`)."""
HOLD_S = 0.5
"""How long each warming task holds its worker, so that the tasks overlap and the daemon
forks one worker per task instead of reusing the first one that finished."""


def python_steps(frame: DataFrame) -> int:
    """`python_operators` of the query's analyzed plan."""
    return python_operators(str(frame._jdf.queryExecution().analyzed().toString()))


def python_operators(plan: str) -> int:
    """Python operators in a plan's text (at least 1): how many Python workers one task may
    hold at once, since each operator of a stage streams its rows through a worker of its own
    (the decode step and a job's mapInArrow: two per source task). Operators of another
    stage are counted too: warming one worker too many costs a fork, one too few a cold
    import in the first batch."""
    return max(1, len(_PYTHON_NODE.findall(plan)))


def modules_of(job: Job) -> tuple[str, ...]:
    """What the query's Python functions import when a worker unpickles them: the runtime's
    decode step, the job's formats, its builder's and its function versions' modules."""
    found = [INPUT_STEP, type(job.input).__module__, type(job.output).__module__,
             getattr(job.build, "__module__", None),
             *(getattr(f, "__module__", None) for f in job.functions.values())]
    return tuple(dict.fromkeys(m for m in found if m and m != "__main__"))


@dataclass(frozen=True)
class Warmed:
    seconds: float
    workers: frozenset[int]
    """The process ids of the workers that ran the warming tasks."""

    def describe(self) -> str:
        return f"{len(self.workers)} Python workers warmed in {self.seconds:.1f} s"


def warm(spark: SparkSession, tasks: int, steps: int, modules: Sequence[str]) -> Warmed:
    """Start `tasks` × `steps` Python workers with `modules` imported.

    A DataFrame of `tasks` partitions through `steps` chained mapInArrow operators, each
    holding its worker for `HOLD_S`: one worker per operator and task, as the query's tasks
    hold them. Each operator adds its worker's pid as a column. Through SQL, not the RDD API:
    Spark keeps the RDD API's Python workers in a pool of their own, which no query uses."""
    wanted = (ARROW_SERIALIZERS, *modules)
    started = time.monotonic()
    frame = spark.range(0, tasks, 1, tasks).selectExpr("id AS pid_0")
    for step in range(1, steps + 1):
        schema = ", ".join(f"pid_{n} long" for n in range(step + 1))
        frame = frame.mapInArrow(_Load(wanted), schema)
    rows = frame.collect()
    return Warmed(time.monotonic() - started,
                  frozenset(pid for row in rows for pid in list(row)[1:]))


@dataclass(frozen=True)
class _Load:
    """One warming operator (picklable): import, hold the worker, add its pid."""

    modules: tuple[str, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for name in self.modules:
            # A module that does not import fails the query's own tasks, with their context.
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        for batch in batches:
            time.sleep(HOLD_S)
            pid = pa.array([os.getpid()] * batch.num_rows, pa.int64())
            yield pa.RecordBatch.from_arrays([*batch.columns, pid],
                                             names=[*batch.schema.names,
                                                    f"pid_{batch.num_columns}"])
