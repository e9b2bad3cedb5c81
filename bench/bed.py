"""The bed every benchmark runs on: one fresh local broker in a temporary directory.

Owns the broker's start and stop, the benchmark's scratch directory, and the SIGTERM rule: a
SIGTERM'd benchmark unwinds like Ctrl-C, so the jobs, controllers and broker it started (each
in its own session, out of reach of the terminal's signals) are stopped on the way out; a
benchmark started in the background ignores SIGINT. Also the environment of the jobs and
controllers a benchmark starts on its fresh topics, and the wait on what they write that stops
as soon as one of them dies. Neighbours: every `bench.*` command that needs a broker enters
`local_broker`; `streamctl.stack.broker` runs it; `streamctl.processes` starts the children.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from streamctl.loadgen import producer_config
from streamctl.processes import Child, sigterm_as_interrupt
from streamctl.stack.broker import LocalBroker
from streamctl.stack.defaults import default_state_dir
from streamctl.stack.tcp import find_free_ports

CONTROL_KEY = "bench-control-key-0123456789abcdef"
"""The key every benchmark's jobs and controllers share: a job refuses to start without one."""


def process_env(bootstrap: str, **more: str) -> dict[str, str]:
    """What a benchmark's `job run` or `controller run` process needs in its environment: the
    broker, the control key, and `more` (topics, a group)."""
    return {"STREAMCTL_BOOTSTRAP_SERVERS": bootstrap, "STREAMCTL_CONTROL_KEY": CONTROL_KEY,
            **more}


def loop_env(bootstrap: str, topics: Mapping[str, str], **more: str) -> dict[str, str]:
    """`process_env` of a job and controllers that meet on a benchmark's own `topics` (keyed
    metrics, control, acks, decisions, lease), with `more` (a controllers' group)."""
    return process_env(bootstrap, STREAMCTL_METRICS_TOPIC=topics["metrics"],
                       STREAMCTL_CONTROL_TOPIC=topics["control"],
                       STREAMCTL_ACK_TOPIC=topics["acks"],
                       STREAMCTL_DECISIONS_TOPIC=topics["decisions"],
                       STREAMCTL_CONTROLLER_LEASE_TOPIC=topics["lease"], **more)


def wait_until(done: Callable[[], bool], timeout_s: float, what: str,
               children: Sequence[Child], poll: Callable[[], None]) -> None:
    """`poll` until `done()`; `RuntimeError` after `timeout_s`, or as soon as one of `children`
    has died (with its log's tail): what it would have written will not come."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        for child in children:
            if not child.alive():
                raise RuntimeError(f"the {child.name} died:\n{child.log_tail()}")
        poll()


@dataclass(frozen=True)
class Bed:
    bootstrap_servers: str
    workdir: Path
    """Scratch space for the benchmark's checkpoints, logs and configs; removed afterwards."""


@contextmanager
def local_broker(prefix: str = "streamctl-bench-") -> Iterator[Bed]:
    """A broker on free ports, its Maven jars cached in the default state dir, stopped and its
    directory removed on the way out, also on SIGTERM."""
    with sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        port, controller_port = find_free_ports(2)
        with LocalBroker(Path(tmp) / "state", port=port, controller_port=controller_port,
                         maven_dir=default_state_dir() / "maven") as broker:
            yield Bed(broker.bootstrap_servers, Path(tmp))


def produce_all(bootstrap: str, topic: str, records: Iterable[tuple[str, bytes]]) -> None:
    """Each (key, value) to `topic`, all delivered before it returns (a full producer queue
    waits for deliveries)."""
    producer = Producer(producer_config(bootstrap))
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not deliver the preload to {topic}")
