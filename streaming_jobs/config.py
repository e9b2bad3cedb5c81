"""The job's one typed, frozen configuration, read once at start-up (CLI options over env vars).

Owns the option names, their environment variables, defaults and validation. Neighbours:
`cli` builds argparse options from `OPTIONS`; everything else receives a `JobConfig`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any


class ConfigError(ValueError):
    """A bad option; the message names the option and the accepted range."""


@dataclass(frozen=True)
class JobConfig:
    """Everything the bundled job and its elastic runtime need, validated."""

    bootstrap_servers: str
    """Kafka bootstrap servers (host:port[,host:port]) for data, metrics and control topics."""
    query_id: str = "sensor-averages"
    """Stable name of the query; control tuples are addressed to it, metrics keyed by it."""
    instance_id: str = ""
    """This running instance; empty means hostname-pid (filled in by `from_sources`)."""
    input_topic: str = "sensor-readings"
    output_topic: str = "sensor-averages"
    dlq_topic: str = "sensor-readings.dlq"
    """Dead-letter topic for input records that fail to decode."""
    metrics_topic: str = "streamctl.metrics"
    control_topic: str = "streamctl.control"
    ack_topic: str = "streamctl.acks"
    checkpoint_dir: str = ""
    """Spark checkpoint location; empty means .streamctl/checkpoints/<query_id>."""
    input_parallelism: int = 2
    """Initial Kafka source minPartitions (Spark tasks reading the input per batch)."""
    max_offsets_per_trigger: int = 4000
    """Cap on records per batch: keeps backlog visible as latest - end and quiesce short."""
    trigger_interval_s: float = 2.0
    enrichment_cost_ms: float = 5.0
    """Simulated remote-lookup cost per record (slept once per Arrow batch)."""
    window_s: int = 10
    watermark_s: int = 10
    state_partitions: int = 4
    task_slots: int = 16
    """Spark runs local[task_slots]; also the upper bound for input_parallelism."""
    metrics_port: int = 9301
    """Prometheus endpoint port; 0 turns it off."""
    spark_jars: str = ""
    """Comma-separated jar paths for spark.jars (the Spark Kafka connector)."""
    max_runtime_s: float = 0.0
    """Stop cleanly after this many seconds; 0 runs until SIGTERM / Ctrl-C."""

    def __post_init__(self) -> None:
        for problem in _problems(self):
            raise ConfigError(problem)

    @property
    def jar_list(self) -> tuple[str, ...]:
        return tuple(j.strip() for j in self.spark_jars.split(",") if j.strip())

    @classmethod
    def from_sources(
        cls, options: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
    ) -> JobConfig:
        """Options (non-None values win) over `STREAMCTL_<FIELD>` env vars over defaults."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = (options or {}).get(f.name)
            if raw is None:
                raw = env.get(env_var(f.name))
            if raw is not None:
                values[f.name] = _parse(f.name, raw, _PARSERS.get(f.type, str))  # type: ignore[arg-type]
        if "bootstrap_servers" not in values:
            raise ConfigError("--bootstrap-servers (or STREAMCTL_BOOTSTRAP_SERVERS) is required")
        values.setdefault("instance_id", f"{socket.gethostname()}-{os.getpid()}")
        query_id = values.get("query_id", cls.query_id)
        values.setdefault("checkpoint_dir", f".streamctl/checkpoints/{query_id}")
        return cls(**values)


def env_var(field_name: str) -> str:
    return f"STREAMCTL_{field_name.upper()}"


_PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "float": float, "str": str}


def _parse(name: str, raw: Any, parser: Callable[[str], Any]) -> Any:
    try:
        return parser(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {raw!r} is not a valid {parser.__name__}") from None


def _problems(c: JobConfig) -> list[str]:
    positive = {
        "input_parallelism": c.input_parallelism, "max_offsets_per_trigger":
        c.max_offsets_per_trigger, "trigger_interval_s": c.trigger_interval_s,
        "window_s": c.window_s, "state_partitions": c.state_partitions,
        "task_slots": c.task_slots,
    }
    problems = [f"{k} must be > 0, got {v}" for k, v in positive.items() if v <= 0]
    if c.input_parallelism > c.task_slots:
        problems.append(
            f"input_parallelism {c.input_parallelism} exceeds task_slots {c.task_slots}")
    for name, value in (("enrichment_cost_ms", c.enrichment_cost_ms),
                        ("watermark_s", c.watermark_s), ("max_runtime_s", c.max_runtime_s)):
        if value < 0:
            problems.append(f"{name} must be >= 0, got {value}")
    if not 0 <= c.metrics_port <= 65535:
        problems.append(f"metrics_port must be 0 (off) or a TCP port, got {c.metrics_port}")
    topics = ("input_topic", "output_topic", "dlq_topic", "metrics_topic", "control_topic",
              "ack_topic", "query_id", "bootstrap_servers")
    problems += [f"{t} must not be empty" for t in topics if not getattr(c, t).strip()]
    return problems
