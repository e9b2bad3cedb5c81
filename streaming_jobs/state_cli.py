"""`job state`: a job's desired state, read back from the compacted state topic.

Owns the command's options and output (text or JSON). The job publishes its state after
start-up and after every applied tuple (`runtime.job`); this reads the newest record for one
query id. Neighbours: `cli` registers it; `runtime.kafka.read_latest` does the reading.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from schemas import knobs, topics
from schemas.records import DesiredStateRecord
from streamctl.security import kafka as kafka_security
from streamctl.security.kafka import DEFAULT_BOOTSTRAP
from streaming_jobs.errors import UserError


def add_state_command(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "state", help="print a job's desired state (parameters in force and their epoch)",
        description="Read the newest DesiredState record of a query from the compacted state "
                    "topic: what the job has in force, at which epoch, set by which tuple.")
    parser.add_argument("--query-id", required=True, help="the query to look up")
    parser.add_argument("--bootstrap-servers", default=None,
                        help="Kafka bootstrap servers; env STREAMCTL_BOOTSTRAP_SERVERS "
                             f"(default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--state-topic", default=None,
                        help=f"env STREAMCTL_STATE_TOPIC (default {topics.STATE})")
    parser.add_argument("--timeout-s", type=float, default=10.0,
                        help="give up reading after this many seconds (default 10)")
    parser.add_argument("--json", action="store_true", help="print the record as JSON")
    parser.set_defaults(handler=state_command)
    return parser


def state_command(args: argparse.Namespace) -> int:
    from streaming_jobs.runtime.kafka import read_latest  # imports confluent_kafka

    bootstrap = (args.bootstrap_servers or os.environ.get("STREAMCTL_BOOTSTRAP_SERVERS")
                 or DEFAULT_BOOTSTRAP)
    topic = args.state_topic or os.environ.get("STREAMCTL_STATE_TOPIC") or topics.STATE
    try:
        security = kafka_security.from_env_raising(UserError)
    except UserError as exc:
        print(f"job state: {exc}", file=sys.stderr)
        return 2
    try:
        record = read_latest(bootstrap, topic, args.query_id, DesiredStateRecord,
                             args.timeout_s, security)
    except (LookupError, TimeoutError) as exc:
        print(f"job state: {exc} (bootstrap {bootstrap}, topic {topic})", file=sys.stderr)
        return 1
    if record is None:
        print(f"job state: no desired state for query {args.query_id!r} in {topic}",
              file=sys.stderr)
        return 1
    print(json.dumps(record.to_avro(), sort_keys=True) if args.json else describe(record))
    return 0


def describe(record: DesiredStateRecord) -> str:
    at = datetime.fromtimestamp(record.updated_at_ms / 1000, UTC).isoformat(timespec="seconds")
    lines = [f"query {record.query_id} (instance {record.instance_id}): epoch {record.epoch}, "
             f"set by {record.control_id or 'start-up'} at {at}"]
    for name in (n for n in knobs.ALL if n != knobs.ACTIVE_INSTANCE):
        lines.append(f"  {name:<24} {getattr(record, name)}")
    lines.append(f"  {'active_instance':<24} {record.active_instance or '(no failover yet)'}")
    return "\n".join(lines)
