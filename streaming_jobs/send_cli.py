"""`job send`: one signed control tuple from an operator, and the job's ack.

The controller sizes jobs by itself; some changes are an operator's decision (switching the
input topic after moving its producers, a UDF version, a throttle during an incident). This
signs a tuple with the same shared key, gives it the next epoch after the job's desired state
(read from the state topic) unless one is given, sends it keyed like the controller's
(`<query>/<parameter>`) and waits for the ack. Neighbours: `cli` registers it;
`runtime.kafka` does the Kafka I/O; `schemas.auth` signs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from schemas import auth, topics
from schemas.records import Ack, ControlTuple, DesiredStateRecord, KnobSetting, Outcome
from streamctl.security import kafka as kafka_security
from streamctl.security.kafka import DEFAULT_BOOTSTRAP, PLAINTEXT, KafkaSecurity
from streaming_jobs.errors import UserError


def add_send_command(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "send", help="send one signed control tuple to a job and wait for its ack",
        description="Sign a control tuple with the controller's key (STREAMCTL_CONTROL_KEY or "
                    "STREAMCTL_CONTROL_KEY_FILE), send it and print the job's ack. Exits 0 "
                    "when it was applied, 1 otherwise. On a secured broker (STREAMCTL_KAFKA_*) "
                    "only the controller's principal may write the control topic, so log in "
                    "as that principal.")
    parser.add_argument("--query-id", required=True, help="the query to reconfigure")
    parser.add_argument("--parameter", required=True,
                        help="e.g. input_topic, udf_version, max_offsets_per_trigger")
    parser.add_argument("--value", required=True, help="the new value, as text")
    parser.add_argument("--together", action="append", default=[], type=_setting,
                        metavar="PARAMETER=VALUE",
                        help="another knob set in the same reconfiguration (one pause, one "
                             "ack, all or nothing); repeat for more, e.g. --together "
                             "max_offsets_per_trigger=6000")
    parser.add_argument("--epoch", type=int, default=None,
                        help="default: the epoch of the job's desired state + 1")
    parser.add_argument("--reason", default="operator", help="recorded with the tuple")
    for option, env, default in (("bootstrap-servers", "BOOTSTRAP_SERVERS", DEFAULT_BOOTSTRAP),
                                 ("control-topic", "CONTROL_TOPIC", topics.CONTROL),
                                 ("ack-topic", "ACK_TOPIC", topics.ACKS),
                                 ("state-topic", "STATE_TOPIC", topics.STATE)):
        parser.add_argument(f"--{option}", default=os.environ.get(f"STREAMCTL_{env}", default),
                            help=f"env STREAMCTL_{env} (default {default})")
    parser.add_argument("--timeout-s", type=float, default=300.0,
                        help="wait this long for the ack (an input switch drains first; "
                             "default 300)")
    parser.set_defaults(handler=send_command)
    return parser


def send_command(args: argparse.Namespace) -> int:
    named = [args.parameter, *(s.parameter for s in args.together)]
    twice = sorted({p for p in named if named.count(p) > 1})
    if twice:  # the job would refuse the tuple; say so before signing and sending it
        print(f"job send: {', '.join(twice)} set twice (--parameter, --together): a tuple "
              "sets each knob once", file=sys.stderr)
        return 2
    try:
        key, security = _credentials()
    except UserError as exc:
        print(f"job send: {exc}", file=sys.stderr)
        return 2
    try:
        ack = send(args.bootstrap_servers, args.query_id, args.parameter, args.value, key,
                   together=args.together, epoch=args.epoch, reason=args.reason,
                   control_topic=args.control_topic, ack_topic=args.ack_topic,
                   state_topic=args.state_topic, timeout_s=args.timeout_s, security=security)
    except (LookupError, TimeoutError) as exc:
        print(f"job send: {exc}", file=sys.stderr)
        return 1
    pause = f" (pause {ack.pause_ms} ms)" if ack.outcome is Outcome.APPLIED else ""
    print(f"{ack.outcome.value.lower()}{pause}: {ack.detail}")
    return 0 if ack.outcome is Outcome.APPLIED else 1


def _credentials() -> tuple[bytes, KafkaSecurity]:
    """The key that signs the tuple and how to log in to Kafka, from the environment;
    `UserError` saying what to set or fix."""
    try:
        key = auth.key_from_env()
    except auth.ControlKeyError as exc:
        raise UserError(str(exc)) from None
    if key is None:
        raise UserError(f"no control key: set {auth.KEY_ENV} or {auth.KEY_FILE_ENV}")
    return key, kafka_security.from_env_raising(UserError)


def _setting(text: str) -> KnobSetting:
    parameter, sep, value = text.partition("=")
    if not sep or not parameter.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not PARAMETER=VALUE")
    return KnobSetting(parameter.strip(), value)


def send(bootstrap: str, query_id: str, parameter: str, value: str, key: bytes, *,
         together: Sequence[KnobSetting] = (), epoch: int | None = None, reason: str = "operator",
         control_topic: str = topics.CONTROL, ack_topic: str = topics.ACKS,
         state_topic: str = topics.STATE, timeout_s: float = 300.0,
         security: KafkaSecurity = PLAINTEXT) -> Ack:
    """Send the signed tuple (`parameter` set to `value`, and each of `together` with it) and
    return the job's ack; `LookupError` without an epoch to
    follow, `TimeoutError` without an ack in time."""
    from streaming_jobs.runtime.kafka import read_latest

    if epoch is None:
        state = read_latest(bootstrap, state_topic, query_id, DesiredStateRecord,
                            security=security)
        if state is None:
            raise LookupError(f"no desired state of {query_id!r} in {state_topic}: give --epoch")
        epoch = state.epoch + 1
    tuple_ = signed_tuple(query_id, parameter, value, key, epoch=epoch, together=together,
                          reason=reason)
    with sender(bootstrap, control_topic, ack_topic, security) as out:
        return out.deliver(tuple_, timeout_s)


def signed_tuple(query_id: str, parameter: str, value: str, key: bytes, *, epoch: int,
                 together: Sequence[KnobSetting] = (), reason: str = "operator") -> ControlTuple:
    """An operator's tuple setting `parameter` to `value` (and `together` with it) at
    `epoch`, signed with `key`."""
    return auth.sign(ControlTuple(
        control_id=str(uuid.uuid4()), query_id=query_id, operator_id="operator",
        parameter=parameter, value=value, epoch=epoch, issuer="streamctl job send",
        reason=reason, together=tuple(together), issued_at_ms=int(time.time() * 1000)), key)


class Sender:
    """Publishes tuples to the control topic and reads the acks that answer them."""

    def __init__(self, publisher: Any, acks: Any, control_topic: str) -> None:
        self._publisher, self._acks, self._control_topic = publisher, acks, control_topic

    def publish(self, tuple_: ControlTuple) -> None:
        self._publisher.publish(self._control_topic, f"{tuple_.query_id}/{tuple_.parameter}",
                                tuple_)
        self._publisher.flush()

    def answer(self, control_id: str, wait_s: float) -> Ack | None:
        """The ack of `control_id` if one arrives within `wait_s` (other acks are dropped)."""
        deadline = time.monotonic() + wait_s
        while True:
            record = self._acks.poll(max(0.0, min(0.5, deadline - time.monotonic())))
            if isinstance(record, Ack) and record.control_id == control_id:
                return record
            if time.monotonic() >= deadline:
                return None

    def deliver(self, tuple_: ControlTuple, timeout_s: float) -> Ack:
        """Publish `tuple_` and return its ack; `TimeoutError` without one in time."""
        self.publish(tuple_)
        ack = self.answer(tuple_.control_id, timeout_s)
        if ack is None:
            raise TimeoutError(f"no ack for control {tuple_.control_id} within {timeout_s:.0f} s")
        return ack


@contextmanager
def sender(bootstrap: str, control_topic: str = topics.CONTROL,
           ack_topic: str = topics.ACKS, security: KafkaSecurity = PLAINTEXT
           ) -> Iterator[Sender]:
    """A `Sender` whose ack consumer holds the ack topic at its end before it is yielded (an
    ack before that is not one of ours): the time from a publication to its ack is the
    job's, not the consumer's start."""
    from streaming_jobs.runtime.kafka import RecordPublisher, TypedConsumer

    # Under the controller's default group prefix, which its principal may read (stack.acls).
    acks = TypedConsumer(bootstrap, ack_topic, f"streamctl-controller.send.{uuid.uuid4()}", Ack,
                         security)
    publisher = RecordPublisher(bootstrap, "streamctl-send", security)
    try:
        _await_assignment(acks, ack_topic)
        yield Sender(publisher, acks, control_topic)
    finally:
        publisher.close()
        acks.close()


def _await_assignment(acks: Any, topic: str, timeout_s: float = 30.0) -> None:
    """Poll until the consumer holds the ack topic at its end (acks before are not ours)."""
    deadline = time.monotonic() + timeout_s
    while not acks.assigned.is_set():
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read {topic} within {timeout_s:.0f} s")
        acks.poll(0.2)
