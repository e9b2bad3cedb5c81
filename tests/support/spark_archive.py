"""A class-data archive of a Spark driver's classes, so that the suite's drivers start sooner.

Every job process a test starts is a Spark driver JVM that loads, parses and verifies the same
tens of thousands of classes before its first batch; on 2 cores that start is CPU-bound and
paid dozens of times a run. The JDK's own class-data sharing (AppCDS) maps them from an archive
instead: one driver writes the classes it loaded at its exit (`-XX:ArchiveClassesAtExit`),
every later one reads them (`-XX:SharedArchiveFile`). The archive is written once per JDK and
pyspark install (its name is a digest of the java binary, its version and pyspark's jars, which
the JVM checks against the class path), under the state dir, by a driver with the jobs' own
session (`build_session`) that runs a short batch query and a short stateful streaming query.
The suite hands it to every driver through `SPARK_SUBMIT_OPTS`, which `spark-submit` puts on
the driver's JVM only (Spark's master, worker and executors have other class paths). A JVM
whose class path does not match the archive loads its classes as usual: the archive changes how
fast a driver starts, never what it does. A write that failed is remembered, so a run does not
pay for it again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from streamctl.stack.errors import StackError
from streamctl.stack.jvm import require_java

SUBMIT_OPTIONS = "SPARK_SUBMIT_OPTS"

_WORKLOAD = """
import sys
from pyspark.sql import functions as F
from streaming_jobs.config import JobConfig
from streaming_jobs.runtime.query.session import build_session
spark = build_session(JobConfig(bootstrap_servers="127.0.0.1:9"))  # the jobs' own session
plus_one = F.udf(lambda v: v + 1, "long")
spark.range(1000).withColumn("k", F.col("id") % 7).groupBy("k").agg(
    F.sum(plus_one("id"))).collect()
rates = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
         .withWatermark("timestamp", "2 seconds")
         .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 5).alias("k")).count())
query = (rates.writeStream.format("noop").outputMode("append")
         .option("checkpointLocation", sys.argv[1]).trigger(processingTime="1 second").start())
query.awaitTermination(6)  # a few batches, state and watermark included
query.stop()
spark.stop()
"""


def archive_path(state_dir: Path) -> Path:
    """Where the archive for this JDK and pyspark install is (whether written yet or not)."""
    java = require_java()
    version = subprocess.run([str(java), "-version"], capture_output=True, text=True,
                             timeout=60).stderr
    jars = Path(str(importlib.metadata.distribution("pyspark").locate_file("pyspark/jars")))
    digest = hashlib.sha256()
    for part in (str(java.resolve()), version, str(jars.resolve())):
        digest.update(part.encode())
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name} {stat.st_size} {stat.st_mtime_ns}".encode())
    return state_dir / "jvm" / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def ensure_archive(state_dir: Path) -> Path | None:
    """The archive, written first if there is none yet; None (drivers start as before) when
    none could be written, now or by an earlier run, with why on stderr."""
    try:
        target = archive_path(state_dir)
    except (StackError, OSError, subprocess.SubprocessError) as exc:
        print(f"no class-data archive for the Spark drivers: {exc}", file=sys.stderr)
        return None
    failed = target.with_suffix(".failed")
    if target.is_file():
        return target
    if failed.is_file():
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"writing the Spark drivers' class-data archive once: {target}", file=sys.stderr)
    why = _write(target)
    if why is None:
        return target
    failed.write_text(why)
    print(f"no class-data archive for the Spark drivers ({failed}): {why}", file=sys.stderr)
    return None


def _write(target: Path) -> str | None:
    """Run the workload with the archive written at its JVM's exit; why it failed, or None."""
    partial = target.with_suffix(f".{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            env = {**os.environ,
                   SUBMIT_OPTIONS: _with(os.environ, f"-XX:ArchiveClassesAtExit={partial}")}
            # The driver's JVM holds the output pipes until it exits, so the run returns once
            # the JVM has written the archive, not when the Python side is done.
            done = subprocess.run([sys.executable, "-c", _WORKLOAD, checkpoint], env=env,
                                  capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not partial.is_file():
            return f"exit {done.returncode}, archive written: {partial.is_file()}; " \
                   f"{done.stderr[-2000:]}"
        partial.replace(target)  # whole or not at all: another run may be reading the dir
        return None
    except subprocess.TimeoutExpired:
        return "the workload did not finish in 600 s"
    finally:
        partial.unlink(missing_ok=True)


def _with(env: Mapping[str, str], option: str) -> str:
    return " ".join(o for o in (env.get(SUBMIT_OPTIONS), option) if o)


def use_archive(state_dir: Path) -> None:
    """Every Spark driver started from this process on (and from its children) maps the
    archive, written first if needed."""
    archive = ensure_archive(state_dir)
    if archive is not None:
        os.environ[SUBMIT_OPTIONS] = _with(os.environ, f"-XX:SharedArchiveFile={archive}")
