"""A standby's warm-up: the job's plan run once on a few input records, into nothing.

A cold first batch takes several times a warm one (Python workers to start, code to generate,
the Kafka connector and the state store library to load). A standby runs this once after
start-up, so that when it is promoted its first batch is a warm one. It uses a scratch
checkpoint, its own query name and no dead-letter topic, so it touches nothing the active
instance uses. Neighbours: `lifecycle` (`ElasticQuery.warm_up`), `job` (calls it for a
standby, in a thread of its own).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from streaming_jobs.config import RunSettings
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.query.input import DiscardDeadLetters

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from streaming_jobs.runtime.query.plan import Plan

RECORDS = 200
"""Input records the warm-up batch reads: enough to run every operator of the plan."""
TIMEOUT_S = 180.0
"""Longest warm-up (a loaded 2-core machine took 50-70 s)."""


def run_once(spark: SparkSession, plan: Plan, run: RunSettings, desired: DesiredState,
             timeout_s: float = TIMEOUT_S) -> str:
    """Run `plan` with the knobs of `desired` until its first batch is done (or there is no
    input, or the time is up); returns what it did, for the log."""
    query_id = run.query_id

    def discard(batch_df: DataFrame, _batch_id: int) -> None:
        plan.job.output.encode(batch_df).toArrow()

    scratch = tempfile.mkdtemp(prefix=f"streamctl-warm-up-{query_id}-")
    started = time.monotonic()
    query = (plan.build(spark, run, replace(desired, max_offsets_per_trigger=RECORDS),
                        DiscardDeadLetters()).writeStream
             .queryName(f"{query_id}-warm-up").outputMode(plan.output_mode)
             .foreachBatch(discard).option("checkpointLocation", scratch)
             .trigger(processingTime="1 second").start())
    try:
        while time.monotonic() - started < timeout_s and query.isActive:
            progress = query.lastProgress
            if progress is not None:
                return (f"ran one batch of {progress['numInputRows']} input records in "
                        f"{time.monotonic() - started:.1f} s")
            if str(query.status.get("message", "")).startswith("Waiting for data"):
                return "no input to warm up with yet"
            time.sleep(0.2)
        return f"stopped after {time.monotonic() - started:.0f} s without a batch"
    finally:
        query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
