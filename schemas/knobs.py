"""The knobs of a job, by name: the vocabulary of `ControlTuple.parameter` and of
`TaskMetrics.scaling_parameter`, written once for the controller and the jobs.

Each name is a runtime parameter a control tuple may set; what a value means, its bounds and
how a job applies it are the job runtime's (`streaming_jobs.runtime.desired.state`,
whose registry a test holds to `ALL`); which one to size is the controller's
(`controller.core.parallelism`).
"""

from __future__ import annotations

INPUT_PARALLELISM = "input_parallelism"
"""Spark tasks the Kafka source reads with (`minPartitions`): the knob of a job whose work runs
in its source tasks."""
STATE_PARTITIONS = "state_partitions"
"""Partitions of the stateful operator: the knob of a job whose work runs there."""
MAX_OFFSETS_PER_TRIGGER = "max_offsets_per_trigger"
"""The batch cap in records (the throttle)."""
SHED_FRACTION = "shed_fraction"
"""The fraction of low-priority records dropped (load shedding)."""
UDF_VERSION = "udf_version"
"""The version of the job's swappable function."""
OUTPUT_TOPIC = "output_topic"
INPUT_TOPIC = "input_topic"
EXECUTORS = "executors"
"""Executors requested from a cluster manager: more task slots when a knob runs out of them."""
ACTIVE_INSTANCE = "active_instance"
"""Which instance of a query runs it: what a failover sets."""

ALL = (INPUT_PARALLELISM, MAX_OFFSETS_PER_TRIGGER, SHED_FRACTION, UDF_VERSION, OUTPUT_TOPIC,
       EXECUTORS, STATE_PARTITIONS, INPUT_TOPIC, ACTIVE_INSTANCE)
"""Every parameter a control tuple may name."""
SCALING = (INPUT_PARALLELISM, STATE_PARTITIONS)
"""The knobs a job's capacity can grow with (`TaskMetrics.scaling_parameter`)."""
TOPICS = frozenset({OUTPUT_TOPIC, INPUT_TOPIC})
