"""Several controllers on the real broker: the lease (a topic in the controllers' group, one
partition per shard of the queries) elects one leader per shard, each shard's transactional
id fences its deposed leader, and `controller run` processes hand the lead over, or divide the
shards, when an instance is killed or frozen. The "job" here is the test publishing a
recorded overload to the metrics topic; tests/e2e runs the takeover with a real job
(test_closed_loop.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from controller.core.shards import leaders
from controller.kafka.clients import KafkaWriter, ShardWriters
from controller.kafka.lease import KafkaLeadership, ShardCountChanged
from controller.loop.ports import Fenced
from controller.settings import ControllerSettings
from schemas import Ack, ControlTuple, Decision, Outcome, TaskMetrics, codec_for
from schemas.knobs import MAX_OFFSETS_PER_TRIGGER
from schemas.records import TAKEOVER
from streamctl.processes import Child, start_child, stop_all
from tests.integration.test_controller_kafka import KafkaHarness, kafka_harness  # noqa: F401
from tests.support import netns
from tests.support.kafka import decoded_or_none, produce, read_committed
from tests.support.waiting import holds, until
from tests.unit.controller.traces import Job, end_ms, simulate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEASE_SESSION_S = 3.0
"""Short, so the tests wait little for a session to end; the default is 6 s."""
OVERLOAD = Job(rates=[(0, 800)], per_unit=210, parallelism=2, max_per_batch=500, epoch=3)


def overloaded(query_id: str) -> Job:
    """`OVERLOAD` as query `query_id`, on topics of its own."""
    return replace(OVERLOAD, query_id=query_id, source_topic=f"in-{query_id}",
                   sink_topic=f"out-{query_id}")


def publish_overload(harness: KafkaHarness, seconds: int, *query_ids: str) -> None:
    """`seconds` of each query's metrics at 800/s arriving for 420/s of capacity, ending now
    (default one query, q1), in one batch of records."""
    publish_jobs(harness, seconds, [overloaded(q) for q in query_ids or ("q1",)])


def publish_jobs(harness: KafkaHarness, seconds: int, jobs: Sequence[Job]) -> None:
    """`seconds` of each job's metrics, ending now, in one batch of records."""
    # One "now" for every trace: all end when they are written together.
    traces = [(job, simulate(job, seconds)) for job in jobs]
    now_ms = int(time.time() * 1000)  # windows are pruned by the real clock
    records: list[tuple[bytes, bytes]] = []
    for job, trace in traces:
        shift_ms = now_ms - end_ms(trace)
        records += [(job.query_id.encode(), codec_for(TaskMetrics).encode(
            replace(s, batch_start_ms=s.batch_start_ms + shift_ms,
                    batch_end_ms=s.batch_end_ms + shift_ms))) for s in trace]
    # Keyed by query id as the jobs publish them: on a divided topic, in the query's shard.
    produce(harness.settings.bootstrap_servers, harness.settings.metrics_topic, records)


def test_a_deposed_leaders_writer_is_fenced_once_a_new_leader_took_over(
        kafka_harness: KafkaHarness) -> None:  # noqa: F811
    settings = kafka_harness.settings
    old, new = KafkaWriter(settings), KafkaWriter(settings)
    try:
        old.fence()
        old.write((settings.decisions_topic, "k", b"from the old leader"))
        new.fence()
        with pytest.raises(Fenced):
            old.write((settings.decisions_topic, "k", b"from the zombie"))
        new.write((settings.decisions_topic, "k", b"from the new leader"))
        with pytest.raises(Fenced):  # and it stays fenced
            old.write((settings.decisions_topic, "k", b"from the zombie, again"))
    finally:
        old.close()
        new.close()
    assert [m.value() for m in read_committed(settings.bootstrap_servers,
                                              settings.decisions_topic)] == [
        b"from the old leader", b"from the new leader"]


def leadership(harness: KafkaHarness, instance: str) -> KafkaLeadership:
    settings = ControllerSettings(kafka=harness.settings, instance_id=instance,
                                  lease_session_s=LEASE_SESSION_S)
    return KafkaLeadership(settings, lambda e: None)


def test_one_instance_holds_the_lease_and_another_gets_it_when_it_leaves(
        kafka_harness: KafkaHarness) -> None:  # noqa: F811
    a, b = leadership(kafka_harness, "a"), leadership(kafka_harness, "b")
    try:
        until(lambda: a.held() or b.held(), 30, "one instance to hold the lease", 0.1)
        holder, other = (a, b) if a.held() else (b, a)
        holds(lambda: not other.held(), 1, "only one instance holds the lease", 0.1)
        holder.close()  # leaves the group
        until(other.held, 30, "the other instance to get the lease", 0.1)
    finally:
        for lease in (a, b):
            lease.close()


def test_two_instances_divide_four_shards_and_one_gets_all_when_the_other_leaves(
        kafka_harness: KafkaHarness, new_topic: Callable[..., str]) -> None:  # noqa: F811
    kafka_harness.settings = replace(kafka_harness.settings, lease_topic=new_topic(4))
    a, b = leadership(kafka_harness, "a"), leadership(kafka_harness, "b")
    assert a.shards == b.shards == 4
    everything = frozenset(range(4))
    try:
        until(lambda: a.held() | b.held() == everything and a.held() and b.held(), 30,
              "the four shards divided between both instances", 0.1)
        holds(lambda: not a.held() & b.held(), 1, "no shard held by both", 0.1)
        b.close()  # leaves the group
        until(lambda: a.held() == everything, 30, "a to get b's shards", 0.1)
    finally:
        for lease in (a, b):
            lease.close()


def test_an_instance_stops_writing_and_exits_when_the_lease_topic_gains_a_partition(
        kafka_harness: KafkaHarness, new_topic: Callable[..., str]) -> None:  # noqa: F811
    settings = kafka_harness.settings = replace(kafka_harness.settings,
                                                lease_topic=new_topic(2))
    lease = leadership(kafka_harness, "a")
    try:
        until(lambda: lease.held() == {0, 1}, 30, "a to hold both shards", 0.1)
        lease.take_over(frozenset({0, 1}), int(time.time() * 1000))
        lease.writers.write_for("q1", (settings.decisions_topic, "q1", b"while it leads"))
        admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
        admin.create_partitions([NewPartitions(settings.lease_topic, 3)])[
            settings.lease_topic].result(timeout=30)
        with pytest.raises(ShardCountChanged, match="now has 3 partitions, 2 when"):
            until(lambda: not lease.held(), 30, "a to see the third partition", 0.2)
        with pytest.raises(Fenced):
            lease.writers.write_for("q1", (settings.decisions_topic, "q1", b"after"))
    finally:
        lease.close()


def test_a_shard_taken_over_fences_its_old_writer_and_no_other_shard(
        kafka_harness: KafkaHarness) -> None:  # noqa: F811
    settings = kafka_harness.settings
    old, new = ShardWriters(settings, 2), ShardWriters(settings, 2)
    try:
        old.fence(0)
        old.fence(1)
        new.fence(1)  # the group gave shard 1 to another instance
        with pytest.raises(Fenced):
            old.write_for("q4", (settings.decisions_topic, "q4", b"q4 from the zombie"))
        old.write_for("q1", (settings.decisions_topic, "q1", b"q1 from its leader"))
        new.write_for("q4", (settings.decisions_topic, "q4", b"q4 from its leader"))
        with pytest.raises(Fenced):  # a shard it does not hold at all
            new.write_for("q1", (settings.decisions_topic, "q1", b"q1 from a follower"))
    finally:
        old.close()
        new.close()
    assert sorted(m.value() for m in read_committed(settings.bootstrap_servers,
                                                    settings.decisions_topic)) == [
        b"q1 from its leader", b"q4 from its leader"]


@pytest.fixture
def controllers(kafka_harness: KafkaHarness, new_topic: Callable[..., str],  # noqa: F811
                tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """Starts `controller run` instances on the harness's topics as they are at the start
    (with `shards`, on a lease topic of that many partitions: the queries divided into that
    many shards); all stopped at the end."""
    children: list[Child] = []
    lease_topics: dict[int, str] = {}

    def start(name: str, prefix: Sequence[str] = (), session_s: float = LEASE_SESSION_S,
              shards: int = 1, options: Sequence[str] = ()) -> Child:
        k = kafka_harness.settings
        lease = lease_topics.setdefault(shards, k.lease_topic if shards == 1
                                        else new_topic(shards))
        env = {"STREAMCTL_BOOTSTRAP_SERVERS": k.bootstrap_servers,
           "STREAMCTL_METRICS_TOPIC": k.metrics_topic, "STREAMCTL_ACK_TOPIC": k.ack_topic,
           "STREAMCTL_CONTROL_TOPIC": k.control_topic,
           "STREAMCTL_DECISIONS_TOPIC": k.decisions_topic,
           "STREAMCTL_CONTROLLER_LEASE_TOPIC": k.lease_topic,
           "STREAMCTL_CONTROLLER_GROUP_ID": k.group_id,
           "STREAMCTL_CONTROL_KEY": k.control_key}
        child = start_child(name, ["controller", "run", "--metrics-port", "0",
                                   "--instance-id", name,
                                   "--lease-session-s", str(session_s), *options], tmp_path,
                            env | {"STREAMCTL_CONTROLLER_LEASE_TOPIC": lease}, prefix=prefix)
        children.append(child)
        return child

    try:
        yield start
    finally:
        stop_all(children)


def takeovers(harness: KafkaHarness) -> list[Decision]:
    k = harness.settings
    return [d for d in decoded_or_none(read_committed(k.bootstrap_servers, k.decisions_topic),
                                       Decision) if d is not None and d.action == TAKEOVER]


def wait_takeover(harness: KafkaHarness, count: int, timeout_s: float) -> Decision:
    until(lambda: len(takeovers(harness)) >= count, timeout_s, f"takeover number {count}", 0.2)
    return takeovers(harness)[count - 1]


def controls(harness: KafkaHarness) -> list[ControlTuple]:
    k = harness.settings
    return [t for t in decoded_or_none(read_committed(k.bootstrap_servers, k.control_topic),
                                       ControlTuple) if t is not None]


def test_a_killed_leader_is_replaced_by_the_follower_and_the_new_one_acts(
        kafka_harness: KafkaHarness, controllers: Callable[..., Child]) -> None:  # noqa: F811
    first = controllers("c1")
    leader = wait_takeover(kafka_harness, 1, 60)
    assert leader.target_value == "c1"
    second = controllers("c2")
    until(lambda: "controller instance c2 starting" in second.log_tail(50), 30,
          "the second instance to start", 0.2)
    time.sleep(LEASE_SESSION_S)  # c2 has joined the group; nothing may change
    assert len(takeovers(kafka_harness)) == 1 and controls(kafka_harness) == []
    first.kill()
    killed_ms = time.time() * 1000
    taken = wait_takeover(kafka_harness, 2, 30)
    takeover_s = (taken.decided_at_ms - killed_ms) / 1000
    assert taken.target_value == "c2"  # how soon is bench's business, not a test's
    publish_overload(kafka_harness, 30)
    until(lambda: bool(controls(kafka_harness)), 60, "the new leader's scale-up", 0.5)
    print(f"\n[leadership] kill -9 of the leader -> the follower leads after {takeover_s:.1f} s "
          f"(session {LEASE_SESSION_S:.0f} s)")


def shard_leaders(harness: KafkaHarness) -> dict[int, str]:
    """Each shard's leader by the takeover records (the newest naming a shard wins)."""
    return leaders(takeovers(harness))[0]


FLEET_QUERIES = 240
"""Below the default query limit (300), which counts the queries an instance follows too."""
FLEET_OPTIONS = ("--cooldown-s", "2", "--window-s", "300", "--lost-after-min-s", "300",
                 "--ack-timeout-s", "600")
"""Each round's metrics are one burst, and a few hundred queries are decided in up to a
minute on a loaded machine: a burst stays in the window, and its queries are not taken for
silent, for longer than that (the defaults, 60 s and 25 s, had the queries read last judged
lost or pruned unsized); an unanswered tuple is not given up on (and the query decided again)
within the test. The cooldown after an applied tuple is short: the queries fall behind again
at once."""


@pytest.mark.timeout(420)  # its waits scale with how slowly this machine decides the first round
def test_three_instances_decide_each_query_once_and_a_killed_ones_queries_again_by_the_others(
        kafka_harness: KafkaHarness, controllers: Callable[..., Child],  # noqa: F811
        new_topic: Callable[..., str]) -> None:
    """Six shards among c1, c2 and c3, each reading only its shards' partitions of a metrics
    topic of six. A few hundred queries fall behind at once, and each gets exactly one tuple:
    every query decided once, by the one instance leading its shard. The jobs apply them; c1
    is killed -9 and its shards pass to c2 and c3; every query falls behind again at its new
    size, and each gets exactly one more: c1's queries decided again, by the others."""
    kafka_harness.settings = replace(kafka_harness.settings, metrics_topic=new_topic(6))
    names = ("c1", "c2", "c3")
    children = {name: controllers(name, shards=6, options=FLEET_OPTIONS) for name in names}
    until(lambda: set(shard_leaders(kafka_harness).values()) == set(names)
          and len(shard_leaders(kafka_harness)) == 6, 60,
          "the six shards divided among the three instances", 0.5)
    jobs = {f"q{i}": overloaded(f"q{i}") for i in range(FLEET_QUERIES)}
    publish_jobs(kafka_harness, 30, list(jobs.values()))
    started = time.monotonic()
    first = _one_tuple_each(kafka_harness, set(jobs), "a scale-up of every query",
                            alive=list(children.values()))
    # Deciding them again, two instances for three, with c1's shards read back first: on a
    # loaded machine that takes a few times what the first round took here.
    again_s = max(60.0, 4 * (time.monotonic() - started))

    produce(kafka_harness.settings.bootstrap_servers, kafka_harness.settings.ack_topic, [
        (c.query_id.encode(), codec_for(Ack).encode(Ack(  # every job applies its tuple
            c.control_id, c.query_id, "i1", c.epoch, Outcome.APPLIED, "applied", 900,
            int(time.time() * 1000)))) for c in first.values()])
    children["c1"].kill()
    until(lambda: len(shard_leaders(kafka_harness)) == 6
          and "c1" not in shard_leaders(kafka_harness).values(), 60,
          "c1's shards to pass to c2 and c3", 0.5)
    publish_jobs(kafka_harness, 30, [_resized(jobs[q], first[q]) for q in jobs])
    again = _one_tuple_each(kafka_harness, set(jobs), "a second scale-up of every query",
                            before=first, timeout_s=again_s,
                            alive=[children["c2"], children["c3"]])
    assert all(again[q].epoch > first[q].epoch for q in jobs)
    for name in ("c2", "c3"):
        assert children[name].alive()
        assert "reading the metrics of shard" in children[name].log_path.read_text(), name


def _one_tuple_each(harness: KafkaHarness, queries: set[str], what: str,
                    before: Mapping[str, ControlTuple] | None = None, timeout_s: float = 60,
                    alive: Sequence[Child] = ()) -> dict[str, ControlTuple]:
    """Each query's tuple after those of `before`, once every query has one (within
    `timeout_s`, while each of `alive` runs: a failure shows their logs) and none gets a
    second within a lease session (none decided by two instances)."""
    def new() -> list[ControlTuple]:
        sent = {t.control_id for t in (before or {}).values()}
        return [t for t in controls(harness) if t.control_id not in sent]

    until(lambda: {t.query_id for t in new()} == queries, timeout_s, what, 0.5, alive=alive)
    holds(lambda: len(new()) == len(queries), LEASE_SESSION_S,
          "one tuple per query: none decided by two instances", 0.5)
    return {t.query_id: t for t in new()}


def _resized(job: Job, control: ControlTuple) -> Job:
    """`job` once `control` took effect, its load doubled: behind again at the new size."""
    applied = job.applied(control.parameter, int(control.value), control.epoch)
    cap = next((int(s.value) for s in control.together
                if s.parameter == MAX_OFFSETS_PER_TRIGGER), applied.max_per_batch)
    return replace(applied, max_per_batch=cap,
                   rates=[(t, 2 * rate) for t, rate in applied.rates])


LONG_SESSION_S = 40.0
"""A session a member that did not leave would stay listed for (the broker allows up to
60 s)."""


def lease_members(harness: KafkaHarness) -> list[str]:
    """The instances (client ids) in the controllers' group now."""
    k = harness.settings
    admin = AdminClient({"bootstrap.servers": k.bootstrap_servers})
    [described] = admin.describe_consumer_groups([k.group_id]).values()
    return sorted(m.client_id for m in described.result(timeout=30).members)


def test_a_leader_stopped_with_sigterm_leaves_the_group_and_the_follower_takes_over(
        kafka_harness: KafkaHarness, controllers: Callable[..., Child]) -> None:  # noqa: F811
    """A clean stop leaves the controllers' group on its way out: once the process has
    exited it is no longer a member (one that went silent would be, for its whole session),
    and the follower leads."""
    first = controllers("c1", session_s=LONG_SESSION_S)
    assert wait_takeover(kafka_harness, 1, 60).target_value == "c1"
    controllers("c2", session_s=LONG_SESSION_S)
    until(lambda: lease_members(kafka_harness) == ["c1", "c2"], 60,
          "both instances in the controllers' group", 0.5)
    assert first.stop() == 0
    assert lease_members(kafka_harness) == ["c2"]
    assert wait_takeover(kafka_harness, 2, 60).target_value == "c2"


@pytest.mark.parametrize("shards", [1, 2])
def test_a_frozen_leader_is_deposed_and_gets_nothing_applied_when_it_wakes(
        kafka_harness: KafkaHarness, controllers: Callable[..., Child],  # noqa: F811
        shards: int) -> None:
    """With one shard, or two divided between the instances: c1 is frozen past its session,
    c2 takes every shard over and scales a query of each; c1 wakes believing it still leads
    and steps down, and only c2's tuples are on the control topic."""
    first = controllers("c1", shards=shards)
    wait_takeover(kafka_harness, 1, 60)
    second = controllers("c2", shards=shards)
    until(lambda: "controller instance c2 starting" in second.log_tail(50), 30,
          "the second instance to start", 0.2)
    first.pause()  # longer than its session: the group gives its shards to c2
    queries = ["q1", "q4"][:shards]  # shards 0 and 1 of two
    try:
        until(lambda: shard_leaders(kafka_harness) == dict.fromkeys(range(shards), "c2"), 30,
              "c2 to lead every shard", 0.2)
        for query_id in queries:  # both instances will want to scale them up
            publish_overload(kafka_harness, 30, query_id)
        until(lambda: {t.query_id for t in controls(kafka_harness)} == set(queries), 60,
              "the new leader's scale-ups", 0.5)
    finally:
        stepped_down = first.log_tail(400).count("no longer leading")
        first.resume()
    # Once awake it learns it leads nothing, or tries a write, is fenced and steps down: it
    # logs that after any write it tried, and closes its producers with it, so nothing of
    # its can be committed from then on.
    until(lambda: first.log_tail(400).count("no longer leading") > stepped_down, 30,
          "the woken zombie to step down", 0.2)
    scale_ups = controls(kafka_harness)  # c2's; none of c1's got through
    assert sorted(t.query_id for t in scale_ups) == queries
    print(f"\n[leadership] frozen leader woke and stepped down: "
          f"{_line(first, 'no longer leading')}")
    assert all(t.issuer == "streamctl-controller" for t in scale_ups) and first.alive()


def _line(child: Child, text: str) -> str:
    return next(line for line in child.log_tail(300).splitlines() if text in line)


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_a_leader_cut_off_from_the_broker_by_the_network_is_replaced_and_gets_nothing_applied(
        kafka_harness: KafkaHarness, controllers: Callable[..., Child]) -> None:  # noqa: F811
    """c1 runs in a network namespace whose only way to the broker is a veth link; taking the
    link down cuts it off (no signal: the process runs on, believing it leads). c2 takes
    over and scales; when the link comes back c1 steps down, and only c2's tuple is on the
    control topic."""
    port = int(kafka_harness.settings.bootstrap_servers.rsplit(":", 1)[1])
    with netns.namespace() as ns, netns.relay(ns, port):
        first = controllers("c1", prefix=ns.command([]))
        assert wait_takeover(kafka_harness, 1, 60).target_value == "c1"
        second = controllers("c2")
        until(lambda: "controller instance c2 starting" in second.log_tail(50), 30,
              "the second instance to start", 0.2)
        ns.cut()
        cut_ms = time.time() * 1000
        try:
            taken = wait_takeover(kafka_harness, 2, 30)
            assert taken.target_value == "c2" and first.alive()
            publish_overload(kafka_harness, 30)
            until(lambda: bool(controls(kafka_harness)), 60, "the new leader's scale-up", 0.5)
        finally:
            ns.heal()
        until(lambda: "no longer leading" in first.log_tail(200), 60,
              "the cut-off leader to step down once the link is back", 0.5)
        [scale_up] = controls(kafka_harness)
        assert len(takeovers(kafka_harness)) == 2 and first.alive()
    print(f"\n[leadership] leader cut off by the network (veth down): the follower leads "
          f"after {(taken.decided_at_ms - cut_ms) / 1000:.1f} s (session "
          f"{LEASE_SESSION_S:.0f} s); healed: {_line(first, 'no longer leading')}; "
          f"one tuple on the control topic ({scale_up.parameter}={scale_up.value})")


def test_with_every_controller_down_the_job_is_answered_later_and_the_next_one_resumes(
        kafka_harness: KafkaHarness, controllers: Callable[..., Child]) -> None:  # noqa: F811
    """The only controller is killed with its scale-up in flight; the job applies and acks it
    while no controller runs (it needs none: fail-static), and garbage lands on the control
    topic; the next instance to start takes over knowing the answer: it keeps the cooldown
    instead of scaling the same overload again, and skips the garbage, saying so."""
    first = controllers("c1")
    wait_takeover(kafka_harness, 1, 60)
    publish_overload(kafka_harness, 30)
    until(lambda: bool(controls(kafka_harness)), 60, "c1's scale-up", 0.5)
    first.kill()
    [control] = controls(kafka_harness)
    kafka_harness.publish("acks", codec_for(Ack).encode(Ack(
        control.control_id, control.query_id, "i1", control.epoch, Outcome.APPLIED,
        "applied while no controller ran", 900, int(time.time() * 1000))))
    kafka_harness.publish("control", b"\x00garbage on the control topic")
    second = controllers("c2")
    taken = wait_takeover(kafka_harness, 2, 60)
    assert f"({control.control_id}) was applied; cooldown" in taken.reason, taken.reason
    publish_overload(kafka_harness, 30)  # still overloaded, within the cooldown
    until(lambda: "cooling down" in second.log_tail(100), 60,
          "c2 to judge the overload and hold for the cooldown", 0.5)
    assert controls(kafka_harness) == [control]
    assert "skipping undecodable record (1 so far)" in second.log_tail(200)
