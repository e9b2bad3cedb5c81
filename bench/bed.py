"""The bed every benchmark runs on: one fresh local broker in a temporary directory.

Owns the broker's start and stop, the benchmark's scratch directory, and the SIGTERM rule: a
SIGTERM'd benchmark unwinds like Ctrl-C, so the jobs, controllers and broker it started (each
in its own session, out of reach of the terminal's signals) are stopped on the way out; a
benchmark started in the background ignores SIGINT. Neighbours: every `bench.*` command that
needs a broker enters `local_broker`; `streamctl.stack.broker` runs it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from streamctl.loadgen import producer_config
from streamctl.processes import sigterm_as_interrupt
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
