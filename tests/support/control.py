"""Control tuples from a test's side: sending one and awaiting its ack through the production
path (`send_and_await`: `streaming_jobs.send_cli.send`, what `job send` does), and, for the
tuples the controller would never send (unsigned, forged, stale), `signed`, `publish` and
`ack_for`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from confluent_kafka import Message

from schemas import auth
from schemas.codec import codec_for
from schemas.records import Ack, ControlTuple, KnobSetting
from streaming_jobs.send_cli import send
from tests.support.kafka import TopicReader, produce


def signed(query_id: str, parameter: str, value: str, epoch: int,
           key: bytes | None) -> ControlTuple:
    """A tuple as the controller writes it, signed with `key` (None: unsigned)."""
    tuple_ = ControlTuple(control_id=str(uuid.uuid4()), query_id=query_id, operator_id="test",
                          parameter=parameter, value=value, epoch=epoch, issuer="test",
                          reason="test", issued_at_ms=int(time.time() * 1000))
    return tuple_ if key is None else auth.sign(tuple_, key)


def publish(bootstrap: str, control_topic: str, tuple_: ControlTuple) -> None:
    """Write a tuple as it is (unsigned, forged, stale: whatever the test made)."""
    produce(bootstrap, control_topic, [(f"{tuple_.query_id}/{tuple_.parameter}".encode(),
                                        codec_for(ControlTuple).encode(tuple_))])


def send_and_await(bootstrap: str, query_id: str, parameter: str, value: str, epoch: int,
                   key: bytes, *, control_topic: str, ack_topic: str,
                   together: Sequence[KnobSetting] = (), timeout_s: float = 180.0) -> Ack:
    """A signed tuple sent as `job send` sends it; the job's ack."""
    return send(bootstrap, query_id, parameter, value, key, together=together, epoch=epoch,
                reason="test", control_topic=control_topic, ack_topic=ack_topic,
                timeout_s=timeout_s)


def ack_for(acks: TopicReader, control_id: str, timeout_s: float = 180.0) -> Ack:
    """The ack of a tuple sent by `publish`, from a reader of the ack topic."""
    codec = codec_for(Ack)

    def found(messages: list[Message]) -> bool:
        return any(codec.decode(m.value()).control_id == control_id for m in messages)

    messages = acks.until(found, timeout_s)
    return next(a for a in (codec.decode(m.value()) for m in messages)
                if a.control_id == control_id)


def controllers_env(lease_topic: str) -> dict[str, str]:
    """The controllers' lease topic and a group of their own (the group names the
    transactional id that fences a deposed leader: tests must not share one)."""
    return {"STREAMCTL_CONTROLLER_LEASE_TOPIC": lease_topic,
            "STREAMCTL_CONTROLLER_GROUP_ID": f"streamctl-controller-{lease_topic}"}
