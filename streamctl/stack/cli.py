"""The `streamctl stack ...` commands: up, down, status, resolve, topics, kafka, secrets.

Owns only argument parsing and printing; the work is in `broker`, `connector`, `maven`,
`topics`, `kafka_tools` and `secure`. The root CLI (streamctl/cli.py) calls
`add_stack_commands(subparsers)` and then `args.handler(args)`, which returns the exit code.
`python -m streamctl.stack` runs these on their own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from streamctl.security import kafka as kafka_security
from streamctl.security.kafka import DEFAULT_BOOTSTRAP, KafkaSecurity
from streamctl.stack import acls
from streamctl.stack.broker import LocalBroker
from streamctl.stack.broker_files import TEMPLATES
from streamctl.stack.cluster import LocalCluster, describe
from streamctl.stack.connector import resolve_connector
from streamctl.stack.defaults import (
    BOOTSTRAP_ENV,
    DEFAULT_PORT,
    DEFAULT_TOPICS,
    LEASE_TOPIC,
    METRICS_TOPIC,
    STATE_DIR_ENV,
    default_bootstrap_servers,
    default_state_dir,
)
from streamctl.stack.errors import StackError
from streamctl.stack.jvm import require_java
from streamctl.stack.kafka_admin import admin_client
from streamctl.stack.kafka_tools import TOOLS, client_properties, tool_command
from streamctl.stack.maven import BROKER_POM, TOOLS_POM, resolve_classpath
from streamctl.stack.secure import (
    ADMIN,
    CONTROLLER,
    JOB,
    LOAD,
    USERS,
    SecureFiles,
    write_compose_secrets,
)
from streamctl.stack.tcp import HOST
from streamctl.stack.topics import TopicSpec, ensure_topics, partition_counts

Handler = Callable[[argparse.Namespace], int]


def add_stack_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Register `streamctl.stack` and its subcommands on the root parser's subparsers object."""
    stack = subparsers.add_parser(
        "stack", help="run the embedded local stack (Kafka broker, connector jars)",
        description="The embedded local stack: a real Kafka broker (KRaft; one node, or a "
        "cluster with --brokers) and the Maven-resolved jars that the broker and Spark's Kafka "
        "connector need.",
    )  # fmt: skip
    commands = stack.add_subparsers(dest="stack_command", metavar="COMMAND", required=True)
    _add_up(commands)
    _add(commands, "down", _down, "stop the local broker or cluster (controlled shutdown)",
         timeout=30.0)
    _add(
        commands,
        "status",
        _status,
        "show whether the local broker (or each node of the cluster) runs and answers (exit 0 "
        "only if all are ready)",
    )
    resolve = _add(
        commands,
        "resolve",
        _resolve,
        "resolve the broker, Kafka's tools and Spark's Kafka connector jars (instant when "
        "cached)",
    )
    resolve.add_argument(
        "--refresh",
        action="store_true",
        help="ignore cached results (also remembered failures) and rerun Maven",
    )
    resolve.add_argument(
        "--jars",
        action="store_true",
        help="also print the connector jars for spark.jars, one per line",
    )
    topics = _add(commands, "topics", _topics, "create the default topics if missing", timeout=30.0)
    topics.add_argument(
        "--bootstrap-servers",
        default=default_bootstrap_servers(),
        help=f"Kafka address (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP})",
    )
    topics.add_argument(
        "--job", action="append", default=[], metavar="NAME",
        help="also create this job's topics (its declared input, output and dead letters; an "
             "installed job's name or package.module:attr); repeatable",
    )
    topics.add_argument(
        "--partitions", type=int, default=2,
        help="partitions of each --job input and output topic (dead letters get 1)",
    )
    topics.add_argument(
        "--lease-partitions", type=_positive_int, default=1, metavar="N",
        help="partitions of the controllers' lease topic and of the metrics topic, when "
             "they are created: the shards the controller instances divide the queries into "
             "(1: one instance leads them all; docs/failover.md), each instance reading only "
             "its shards' metrics partitions. An existing topic keeps its partitions",
    )
    topics.add_argument(
        "--replication-factor", type=_positive_int, default=None, metavar="N",
        help="replicas of each topic created (default: 3 on a cluster of 3 brokers or more, "
             "else one per broker; min.insync.replicas is always N-1, at least 1)",
    )
    topics.add_argument(
        "--secure-dir",
        type=Path,
        default=None,
        help="also create the SCRAM users whose passwords are in this directory "
        "(<user>-password) and streamctl's ACLs; connect as the admin (STREAMCTL_KAFKA_*)",
    )
    _add_kafka_tool(commands)
    secrets = _add(
        commands,
        "secrets",
        _secrets,
        "generate the secrets of the compose secure override (CA, certificates, passwords, "
        "the broker's config, the control key) where missing",
    )
    secrets.add_argument(
        "--dir", type=Path, required=True, help="where to write them, e.g. deploy/secrets"
    )
    return stack


def _add(
    commands: Any, name: str, handler: Handler, help_text: str, timeout: float | None = None
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=help_text
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"state directory (default: ${STATE_DIR_ENV} or <repo>/.streamctl)",
    )
    if timeout is not None:
        parser.add_argument(
            "--timeout",
            type=float,
            default=timeout,
            metavar="SECONDS",
            help=f"give up after this many seconds (default: {timeout:g})",
        )
    parser.set_defaults(handler=_reporting_errors(handler))
    return parser


def _add_kafka_tool(commands: Any) -> None:
    tool = _add(
        commands, "kafka", _kafka_tool,
        "run one of Kafka's own command-line tools against the broker (e.g. console-consumer "
        "--topic T --from-beginning --isolation-level read_committed)",
    )
    tool.add_argument("tool", choices=list(TOOLS),
                      help=f"the tool (Kafka's kafka-<tool>.sh): {', '.join(TOOLS)}")
    tool.add_argument("args", nargs=argparse.REMAINDER,
                      help="the tool's own options (--help lists them); --bootstrap-server "
                           f"defaults to ${BOOTSTRAP_ENV} or the local broker")


def _add_up(commands: Any) -> None:
    up = _add(
        commands,
        "up",
        _up,
        "start the local Kafka broker (idempotent) and create the default topics",
        timeout=120.0,
    )
    up.add_argument(
        "--brokers", type=_positive_int, default=1, metavar="N",
        help="1 (default): a single broker; 3: a local cluster of three KRaft nodes "
             "(each broker and controller voter) on --port, --port+2, --port+4 with their "
             "controllers one port above; topics get 3 replicas, 2 in sync",
    )
    up.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"Kafka listener port on 127.0.0.1 (default: {DEFAULT_PORT})",
    )
    up.add_argument(
        "--controller-port",
        type=int,
        default=None,
        help="KRaft controller port on 127.0.0.1 (default: --port + 1)",
    )
    up.add_argument(
        "--no-topics", action="store_true", help="do not create the default topics after start"
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="a SASL_SSL (SCRAM) broker with ACLs, its CA and passwords in <state>/secure/ "
        "(a state dir keeps the mode it was first started with)",
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _reporting_errors(handler: Handler) -> Handler:
    """Print a StackError's message (it says what to do next) instead of a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except StackError as exc:
            print(f"streamctl stack {args.stack_command}: {exc}", file=sys.stderr)
            return 1

    return run


def _up(args: argparse.Namespace) -> int:
    if args.brokers > 1:
        return _up_cluster(args)
    if LocalCluster.found(args.state_dir) is not None:
        raise StackError(f"{args.state_dir or default_state_dir()} holds a local cluster: "
                         "`streamctl stack up --brokers 3` starts it; another "
                         "STREAMCTL_STATE_DIR gives a single broker")
    broker = LocalBroker(args.state_dir, args.port, args.controller_port, secure=args.secure)
    started = broker.start(timeout_s=args.timeout)
    print(broker.status().describe() + ("" if started else " (was already running)"))
    _create_default_topics(args, broker.bootstrap_servers, broker.client_security())
    if broker.secure:
        _print_secure_env(broker.secure_files)
    return 0


def _up_cluster(args: argparse.Namespace) -> int:
    if args.secure or args.controller_port is not None:
        option = "--secure" if args.secure else "--controller-port"
        raise StackError(f"{option} is for the single broker: a cluster is plain, its "
                         "controller ports follow --port")
    cluster = LocalCluster(args.state_dir, args.brokers, args.port)
    started = cluster.start(timeout_s=args.timeout)
    print(describe(cluster.status()) + ("" if started else "\n(was already running)"))
    _create_default_topics(args, cluster.bootstrap_servers, kafka_security.PLAINTEXT)
    return 0


def _create_default_topics(args: argparse.Namespace, bootstrap: str,
                           security: KafkaSecurity) -> None:
    if not args.no_topics:
        result = ensure_topics(bootstrap, DEFAULT_TOPICS, args.timeout, security)
        print(f"topics: {len(result.created)} created, {len(result.existing)} already there")
    print(f"export {BOOTSTRAP_ENV}={bootstrap}")


def _print_secure_env(files: SecureFiles) -> None:
    """The admin's settings, and which user each process should run as."""
    for name, value in files.client_env(ADMIN).items():
        print(f"export {name}={value}")
    print(
        f"# as the admin; run the controller, the job and the load generator with "
        f"STREAMCTL_KAFKA_SASL_USERNAME={CONTROLLER}, {JOB} and {LOAD}, each with "
        f"STREAMCTL_KAFKA_SASL_PASSWORD_FILE={files.root}/<user>-password"
    )


def _down(args: argparse.Namespace) -> int:
    cluster = LocalCluster.found(args.state_dir)
    if cluster is not None:
        stopped = cluster.stop(timeout_s=args.timeout)
        print("cluster: stopped" if stopped else f"cluster: was not running ({cluster.root})")
        return 0
    broker = LocalBroker(args.state_dir)
    stopped = broker.stop(timeout_s=args.timeout)
    print("broker: stopped" if stopped else f"broker: was not running ({broker.layout.root})")
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = LocalCluster.found(args.state_dir)
    statuses = cluster.status() if cluster else [LocalBroker(args.state_dir).status()]
    print(describe(statuses))
    running = [s for s in statuses if s.running]
    if running:
        print(f"export {BOOTSTRAP_ENV}=" + ",".join(f"{HOST}:{s.port}" for s in running))
    return 0 if all(s.ready for s in statuses) else 1


def _resolve(args: argparse.Namespace) -> int:
    state_dir = args.state_dir or default_state_dir()
    broker_jars = resolve_classpath(BROKER_POM, state_dir / "maven", refresh=args.refresh)
    kafka_jar = next((jar.name for jar in broker_jars if jar.name.startswith("kafka_")), "?")
    print(f"broker: {kafka_jar} and {len(broker_jars) - 1} dependencies")
    tool_jars = resolve_classpath(TOOLS_POM, state_dir / "maven", refresh=args.refresh)
    print(f"kafka tools ({', '.join(TOOLS)}): {len(tool_jars)} jars")
    connector = resolve_connector(state_dir, refresh=args.refresh)
    print(
        f"spark connector: {connector.candidate.label} for pyspark "
        f"{connector.pyspark_version}; {len(connector.jars)} jars beyond pyspark's own"
    )
    if connector.warning:
        sys.stdout.flush()  # keep the warning next to the line it qualifies
        print(f"warning: {connector.warning}", file=sys.stderr)
    if args.jars:
        print("\n".join(str(jar) for jar in connector.jars))
    return 0


def _topics(args: argparse.Namespace) -> int:
    security = kafka_security.from_env_raising(StackError)
    # The metrics topic as many partitions as shards: each instance reads only its shards'.
    defaults = [replace(s, partitions=args.lease_partitions)
                if s.name in (LEASE_TOPIC, METRICS_TOPIC) else s for s in DEFAULT_TOPICS]
    specs = [replace(s, replication_factor=args.replication_factor)
             for s in (*defaults, *job_topics(args.job, args.partitions))]
    result = ensure_topics(args.bootstrap_servers, specs, args.timeout, security)
    found = partition_counts(args.bootstrap_servers, [s.name for s in specs], security)
    for spec in specs:
        state = "created" if spec.name in result.created else "exists"
        print(f"{spec.name:<24} {found.get(spec.name, spec.partitions)} partition(s)  {state}")
    if args.secure_dir is not None:
        files = SecureFiles(args.secure_dir)
        admin = admin_client(args.bootstrap_servers, security)
        users = {u: files.password(u) for u in USERS if u != ADMIN}
        acls.upsert_scram_users(admin, users, args.timeout)
        count = acls.apply_acls(admin, acls.streamctl_acls(), args.timeout)
        print(f"SCRAM users {', '.join(users)}; {count} ACL bindings")
    return 0


def _kafka_tool(args: argparse.Namespace) -> int:
    state_dir = args.state_dir or default_state_dir()
    work = state_dir / "kafka-tools"
    work.mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.xml"
    log4j.write_text((TEMPLATES / "tools-log4j2.xml").read_text())
    config = None
    properties = client_properties(kafka_security.from_env_raising(StackError))
    if properties is not None:
        config = work / "client.properties"
        config.touch(mode=0o600)  # it holds the password
        config.write_text(properties)
    command = tool_command(args.tool, args.args, java=require_java(),
                           classpath=resolve_classpath(TOOLS_POM, state_dir / "maven"),
                           log4j=log4j, bootstrap_servers=default_bootstrap_servers(),
                           command_config=config)
    return subprocess.run(command, check=False).returncode


def _secrets(args: argparse.Namespace) -> int:
    files = write_compose_secrets(args.dir)
    print(f"secrets for docker-compose.secure.yml in {files.root} (existing files kept)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamctl")
    add_stack_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.handler(args))


def job_topics(references: list[str], partitions: int) -> list[TopicSpec]:
    """The topics the named jobs declare (their defaults), once each."""
    if not references:
        return []
    from streaming_jobs.loading import JobLoadError, load  # the job API imports pyspark

    specs: dict[str, TopicSpec] = {}
    for reference in references:
        try:
            job = load(reference)
        except JobLoadError as exc:
            raise StackError(str(exc)) from None
        for name in (job.topics.input, job.topics.output):
            specs.setdefault(name, TopicSpec(name, partitions=partitions))
        dlq = job.topics.resolved_dead_letters()
        specs.setdefault(dlq, TopicSpec(dlq, partitions=1))
    return [s for s in specs.values() if s.name not in {d.name for d in DEFAULT_TOPICS}]
