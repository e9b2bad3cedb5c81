"""`job run` and `job state`: the bundled job's command line (registered into `streamctl`).

Owns the options (one per `JobConfig` field but the environment-only secret, defaults from
STREAMCTL_* env vars), logging set-up and signal handling. `python -m streaming_jobs run …`
uses the same options. `job state` reads a job's desired state back from the state topic.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import MISSING, fields
from typing import Any

from streaming_jobs.config import ENV_ONLY, ConfigError, JobConfig, env_var

_HELP = {
    "bootstrap_servers": "Kafka bootstrap servers (required)",
    "query_id": "stable query name control tuples address",
    "instance_id": "this instance's id (default hostname-pid)",
    "input_topic": "topic of Avro SensorReading records",
    "output_topic": "topic for Avro SensorWindowAverage records",
    "dlq_topic": "dead-letter topic for undecodable input records",
    "metrics_topic": "topic for per-batch TaskMetrics",
    "control_topic": "topic of control tuples",
    "ack_topic": "topic for acks to control tuples",
    "checkpoint_dir": "Spark checkpoint location (default .streamctl/checkpoints/<query_id>)",
    "input_parallelism": "initial Kafka source minPartitions",
    "max_offsets_per_trigger": "maximum records per micro-batch",
    "trigger_interval_s": "micro-batch trigger interval in seconds",
    "enrichment_cost_ms": "simulated lookup cost per record in milliseconds",
    "window_s": "event-time window length in seconds",
    "watermark_s": "allowed event-time lateness in seconds",
    "state_partitions": "shuffle/state partitions of the aggregation",
    "task_slots": "Spark local[N] task slots in local mode; upper bound of input_parallelism "
                  "there",
    "metrics_port": "Prometheus port (0 = off)",
    "spark_jars": "comma-separated jars for spark.jars (the Spark Kafka connector)",
    "max_runtime_s": "stop cleanly after this many seconds (0 = run until SIGTERM/Ctrl-C)",
    "job": "bundled job: sensor-averages or fraud-detection (sets the default query id and "
           "topics)",
    "state_topic": "compacted topic for the job's desired state (keyed by query id)",
    "max_offsets_per_trigger_limit": "highest batch cap a control tuple may set",
    "max_state_partitions": "highest state partitions a control tuple may set",
    "max_executors": "highest executor count a control tuple may request",
    "shed_fraction": "initial fraction of low-priority records shed",
    "max_shed_fraction": "highest shed fraction a control tuple may set (< 1)",
    "low_priority_prefixes": "comma-separated sensor-id prefixes that may be shed "
                             "(empty = every reading)",
    "input_drain_quiet_s": "an input switch waits until the old topic's end offsets have "
                           "not moved for this long",
    "input_drain_timeout_s": "longest wait for the old topic to drain before an input "
                             "switch is refused",
    "udf_version": "initial enrichment function version (v1 region, v2 sub-region)",
    "spark_master": "Spark master: empty for local[task_slots] in this process, or "
                    "spark://host:port[,host:port] for a Spark standalone cluster",
    "spark_driver_host": "address executors reach this driver at (spark.driver.host; on a "
                         "cluster)",
    "executor_cores": "cores per executor (spark.executor.cores; on a cluster)",
    "executor_memory_mb": "heap per executor in MiB (spark.executor.memory; on a cluster)",
    "executors": "executors to request at start (on a cluster; 0 = what it grants)",
    "role": "active (runs the query) or standby (warm SparkSession, no query, waits to be "
            "promoted; share the active's checkpoint dir); after a failover the instance "
            "named beside the checkpoint is active",
    "heartbeat_interval_s": "seconds between heartbeats of an instance running no batch "
                            "(standby, or idle active)",
}
_KEY_HELP = ("The control key is read from STREAMCTL_CONTROL_KEY or the file named by "
             "STREAMCTL_CONTROL_KEY_FILE, never from an option; the job refuses to start "
             "without one. Applied control tuples are persisted beside the checkpoint "
             "(<checkpoint-dir>.desired-state.json) and win over these options on a restart.")
_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str}


def add_run_command(subparsers: Any, name: str = "run") -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        name, help="run the sensor-averages job with its elastic runtime",
        description="Run the bundled sensor-averages job; it applies control tuples at "
                    "batch boundaries and publishes per-batch metrics. " + _KEY_HELP)
    for f in fields(JobConfig):
        if f.name in ENV_ONLY:
            continue
        default = "" if f.default is MISSING or f.default == "" else f" (default {f.default})"
        parser.add_argument(
            f"--{f.name.replace('_', '-')}", dest=f.name, type=_TYPES[str(f.type)],
            default=None, help=f"{_HELP[f.name]}; env {env_var(f.name)}{default}")
    parser.set_defaults(handler=run_command)
    return parser


def add_job_commands(subparsers: Any) -> None:
    """Register `job run`, `job state` and `job send` on the root CLI's subparsers."""
    job = subparsers.add_parser("job", help="run streaming jobs, read their desired state, "
                                            "send them a control tuple")
    commands = job.add_subparsers(dest="job_command", required=True, metavar="COMMAND")
    add_run_command(commands)
    from streaming_jobs.send_cli import add_send_command
    from streaming_jobs.state_cli import add_state_command

    add_state_command(commands)
    add_send_command(commands)


def run_command(args: argparse.Namespace) -> int:
    _configure_logging()
    try:
        config = JobConfig.from_sources({f.name: getattr(args, f.name, None)
                                         for f in fields(JobConfig) if f.name not in ENV_ONLY})
    except ConfigError as exc:
        print(f"job run: {exc}", file=sys.stderr)
        return 2
    from streaming_jobs.runtime.job import ElasticJob  # imports pyspark: only when running

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        job = ElasticJob(config)
    except ConfigError as exc:  # e.g. a start-up value the parameter registry refuses
        print(f"job run: {exc}", file=sys.stderr)
        return 2
    job.start()
    try:
        return job.run(stop, config.max_runtime_s)
    finally:
        job.stop()


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # py4j logs every callback-server connection at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming_jobs")
    add_run_command(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.handler(args))
