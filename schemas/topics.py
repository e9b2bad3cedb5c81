"""The default names of streamctl's own topics: part of the contract between its processes.

Each carries one record type of `schemas.records` (`docs/architecture.md`, Topics); every
process reads its topics' names from its settings, whose defaults are these. Written once,
here: the jobs' settings, the controller's, the local stack's topic list and the commands
take them from this module.
"""

from __future__ import annotations

METRICS = "streamctl.metrics"
"""`TaskMetrics`: every job's batches, heartbeats and beats."""
CONTROL = "streamctl.control"
"""`ControlTuple`: the controller's tuples to the jobs."""
ACKS = "streamctl.acks"
"""`Ack`: the jobs' answers."""
STATE = "streamctl.state"
"""`DesiredState` (compacted, keyed by query id): each job's parameters in force."""
DECISIONS = "streamctl.decisions"
"""`Decision`: the controller's decision log."""
LEASE = "streamctl.controller-lease"
"""Nothing: its one partition's assignment in the controllers' group is the lead."""
SINK_MARKERS = "streamctl.sink-markers"
"""`SinkCommitMarker` (compacted, keyed by query id): each batch's commit marker."""
