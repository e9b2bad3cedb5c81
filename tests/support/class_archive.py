"""Class-data archives of the suite's Spark drivers and Kafka brokers, so that they start sooner.

Every job process a test starts is a Spark driver JVM, and every broker a Kafka JVM; each loads,
parses and verifies the same thousands of classes before it serves, and on 2 cores that start
is CPU-bound and paid dozens of times a run. The JDK's own class-data sharing (AppCDS) maps
them from an archive instead: one JVM writes the classes it loaded at its exit
(`-XX:ArchiveClassesAtExit`), every later one of its kind reads them (`-XX:SharedArchiveFile`).
An archive is written once per JDK and install (its name is a digest of the java binary, its
version and the jars, which the JVM checks against its class path), under the state dir, by a
short workload of its kind: a driver with the jobs' own session (`build_session`) running a
batch query and a stateful streaming query; a broker taking plain, grouped and transactional
traffic.

The drivers get theirs through `SPARK_SUBMIT_OPTS`, which `spark-submit` puts on the driver's
JVM only. The brokers get theirs from the fixtures that start them (`broker_env`, in the
broker's own `JDK_JAVA_OPTIONS`): a JVM of another class path handed an archive prints a
warning on its stdout, which `spark-submit` parses, so no archive goes to every JVM. An archive
changes how fast a JVM starts, never what it does. A write that failed is remembered, so a run
does not pay for it again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer

from streamctl.stack.broker import LocalBroker
from streamctl.stack.jvm import require_java
from streamctl.stack.maven import BROKER_POM, resolve_classpath
from streamctl.stack.tcp import find_free_ports
from streamctl.stack.topics import TopicSpec, ensure_topics

SUBMIT_OPTIONS = "SPARK_SUBMIT_OPTS"
JAVA_OPTIONS = "JDK_JAVA_OPTIONS"
BROKER_ARCHIVE = "STREAMCTL_TESTS_BROKER_ARCHIVE"
"""Where the brokers' archive is, for the xdist workers (set before they start)."""

_BROKER_STOP_S = 60.0
"""A broker writing its archive at its exit must stop on its own, not be killed."""

_DRIVER_WORKLOAD = """
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


@dataclass(frozen=True)
class Kind:
    """A kind of JVM with an archive of its own."""

    name: str
    jars: Callable[[Path], Iterable[Path]]
    """The jars its class path holds (given the state dir): part of the archive's name."""
    write: Callable[[Path, Path], None]
    """Run the workload with the archive written to the path at the JVM's exit (given the
    state dir); raises why it could not."""


class ArchiveError(Exception):
    """Why an archive could not be written."""


def _pyspark_jars(_state_dir: Path) -> Iterable[Path]:
    jars = Path(str(importlib.metadata.distribution("pyspark").locate_file("pyspark/jars")))
    return sorted(jars.glob("*.jar"))


def _write_driver(partial: Path, _state_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as checkpoint:
        env = {**os.environ, SUBMIT_OPTIONS: _appended(os.environ, SUBMIT_OPTIONS,
                                                      f"-XX:ArchiveClassesAtExit={partial}")}
        # The driver's JVM holds the output pipes until it exits, so the run returns once
        # the JVM has written the archive, not when the Python side is done.
        done = subprocess.run([sys.executable, "-c", _DRIVER_WORKLOAD, checkpoint], env=env,
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise ArchiveError(f"the driver's workload exited {done.returncode}: "
                           f"{done.stderr[-2000:]}")


def _broker_jars(state_dir: Path) -> Iterable[Path]:
    return resolve_classpath(BROKER_POM, state_dir / "maven")  # as `LocalBroker.classpath`


def _write_broker(partial: Path, state_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as root:
        broker = LocalBroker(Path(root), *find_free_ports(2), maven_dir=state_dir / "maven",
                             env={**os.environ, JAVA_OPTIONS: _appended(
                                 os.environ, JAVA_OPTIONS, f"-XX:ArchiveClassesAtExit={partial}")})
        try:
            broker.start(timeout_s=120.0)
            # The storage format before it (a JVM of the same class path) wrote one too.
            partial.unlink(missing_ok=True)
            _broker_traffic(broker.bootstrap_servers)
        finally:
            asked = time.monotonic()
            broker.stop(timeout_s=_BROKER_STOP_S)  # controlled: the JVM writes it as it exits
        if time.monotonic() - asked >= _BROKER_STOP_S:
            raise ArchiveError(f"the broker did not stop within {_BROKER_STOP_S:.0f} s and "
                               "was killed: its archive may be cut short")


def _broker_traffic(bootstrap: str) -> None:
    """A topic made, records written plainly and in a transaction, read in a group."""
    topic = f"archive-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [TopicSpec(topic, partitions=2)], timeout_s=60.0)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(100):
        plain.produce(topic, str(i).encode())
    plain.flush(30)
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(topic, b"in a transaction")
    transactional.commit_transaction(30)
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        reader.subscribe([topic])
        read = 0
        for _ in range(60):  # at most a minute; offsets committed as the consumer closes
            read += len(reader.consume(200, timeout=1.0))
            if read >= 101:
                break
    finally:
        reader.close()


SPARK_DRIVER = Kind("spark-driver", _pyspark_jars, _write_driver)
KAFKA_BROKER = Kind("kafka-broker", _broker_jars, _write_broker)


@functools.cache
def _java_identity() -> str:
    """The java binary and what `java -version` says: an archive fits one JDK only."""
    java = require_java()
    version = subprocess.run([str(java), "-version"], capture_output=True, text=True,
                             timeout=60).stderr
    return f"{java.resolve()}{version}"


def archive_path(state_dir: Path, kind: Kind) -> Path:
    """Where the archive of this kind for this JDK and install is (written yet or not)."""
    digest = hashlib.sha256(_java_identity().encode())
    for jar in kind.jars(state_dir):
        stat = jar.stat()
        digest.update(f"{jar.resolve()} {stat.st_size} {stat.st_mtime_ns}".encode())
    return state_dir / "jvm" / f"{kind.name}-{digest.hexdigest()[:16]}.jsa"


def ensure_archive(state_dir: Path, kind: Kind) -> Path | None:
    """The archive, written first if there is none yet; None (its JVMs start as before) when
    none could be written, now or by an earlier run, with why on stderr."""
    try:
        target = archive_path(state_dir, kind)
        failed = target.with_suffix(".failed")
        if target.is_file():
            return target
        if failed.is_file():
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"writing the {kind.name} class-data archive once: {target}", file=sys.stderr)
        why = _write(target, state_dir, kind)
        if why is None:
            return target
        failed.write_text(why)
        print(f"no {kind.name} class-data archive ({failed}): {why}", file=sys.stderr)
    except Exception as exc:  # an archive only speeds starts up: it never fails a run
        print(f"no {kind.name} class-data archive: {exc!r}", file=sys.stderr)
    return None


def _write(target: Path, state_dir: Path, kind: Kind) -> str | None:
    """Run the kind's workload with the archive written at its JVM's exit; why it failed, or
    None."""
    partial = target.with_suffix(f".{os.getpid()}.partial")
    try:
        kind.write(partial, state_dir)
        if not partial.is_file():
            return "the workload ran, but its JVM wrote no archive"
        partial.replace(target)  # whole or not at all: another run may be reading the dir
        return None
    except Exception as exc:  # whatever it was, remembered in `.failed`
        return repr(exc)
    finally:
        partial.unlink(missing_ok=True)


def _appended(env: Mapping[str, str], name: str, option: str) -> str:
    """The options in `env[name]` with `option` after them."""
    return " ".join(o for o in (env.get(name), option) if o)


def use_archives(state_dir: Path) -> None:
    """Every Spark driver started from this process on (and from its children) maps its
    archive, and every broker started with `broker_env` maps its own; written first if
    needed."""
    driver = ensure_archive(state_dir, SPARK_DRIVER)
    if driver is not None:
        os.environ[SUBMIT_OPTIONS] = _appended(os.environ, SUBMIT_OPTIONS,
                                               f"-XX:SharedArchiveFile={driver}")
    broker = ensure_archive(state_dir, KAFKA_BROKER)
    if broker is not None:
        os.environ[BROKER_ARCHIVE] = str(broker)


def broker_java_options() -> dict[str, str]:
    """What a broker a fixture starts has in its environment besides this process's: its
    `JDK_JAVA_OPTIONS` mapping the brokers' archive, when there is one."""
    archive = os.environ.get(BROKER_ARCHIVE)
    if not archive:
        return {}
    return {JAVA_OPTIONS: _appended(os.environ, JAVA_OPTIONS, f"-XX:SharedArchiveFile={archive}")}


def broker_env() -> dict[str, str]:
    """The environment of a broker a fixture starts (`broker_java_options`)."""
    return {**os.environ, **broker_java_options()}
