"""The one process bed the process tiers share: the environment a test's job and controller
processes run in (its own topics, its own controller group), and one watch over what they
write (metrics, decisions, acks) that fails at once when one of them died.

`tests.e2e.loop` starts closed loops on it and `tests.support.fault_bed` breaks things on it;
neither builds its own environment or reads the topics its own way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schemas import Ack, Decision, Outcome, TaskMetrics
from schemas.records import TAKEOVER
from streamctl.processes import Child
from streamctl.tail import Tail
from streamctl.view import QueryView
from tests.support.control import controllers_env
from tests.support.waiting import until


def bed_env(bootstrap: str, topics: dict[str, str],
            control_key: str | None = None) -> dict[str, str]:
    """A process's environment on the bed's control-plane `topics` (metrics, control, acks,
    decisions, lease), with `control_key` when the test signs tuples itself."""
    key = {} if control_key is None else {"STREAMCTL_CONTROL_KEY": control_key}
    return {
        "STREAMCTL_BOOTSTRAP_SERVERS": bootstrap,
        "STREAMCTL_METRICS_TOPIC": topics["metrics"], "STREAMCTL_CONTROL_TOPIC": topics["control"],
        "STREAMCTL_ACK_TOPIC": topics["acks"], "STREAMCTL_DECISIONS_TOPIC": topics["decisions"],
        **controllers_env(topics["lease"]), **key,
    }


def assert_running(children: Sequence[Child]) -> None:
    """Each child the test has not stopped itself is still running; else fail with its log."""
    for child in children:
        if child.process.returncode is None:
            assert child.alive(), f"{child.name} died:\n{child.log_tail()}"


@dataclass
class Watch:
    """Reads the bed's metrics (of `query_id`, or of each query of a pipeline), decisions and
    acks from the beginning, and fails at once, with its log, when one of `children` died."""

    bootstrap: str
    topics: dict[str, str]
    query_id: str | Sequence[str]
    children: list[Child]
    views: dict[str, QueryView] = field(init=False)
    metrics: list[TaskMetrics] = field(default_factory=list)
    """Every record of the watched queries, of every instance, in arrival order."""
    decisions: list[Decision] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    tail: Tail = field(init=False)

    def __post_init__(self) -> None:
        ids = [self.query_id] if isinstance(self.query_id, str) else list(self.query_id)
        self.views = {q: QueryView(q) for q in ids}
        t = self.topics
        self.tail = Tail(self.bootstrap, {t["metrics"]: TaskMetrics, t["acks"]: Ack,
                                          t["decisions"]: Decision}, from_beginning=True)

    @property
    def view(self) -> QueryView:
        """The (first) watched query's view."""
        return next(iter(self.views.values()))

    def consume(self, timeout_s: float = 0.2) -> None:
        for _topic, record in self.tail.poll(timeout_s):
            if isinstance(record, TaskMetrics) and record.query_id in self.views:
                self.views[record.query_id].add(record)
                self.metrics.append(record)
            elif isinstance(record, Decision):
                self.decisions.append(record)
            elif isinstance(record, Ack):
                self.acks.append(record)
        assert_running(self.children)

    def until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Consume until `predicate()` holds; fail after `timeout_s` naming `what`, with the
        newest decisions seen (what the controller thought meanwhile)."""
        def ready() -> bool:
            self.consume()
            return predicate()

        try:
            until(ready, timeout_s, what, 0)
        except AssertionError as exc:
            said = "\n".join(f"  {d.query_id} {d.action} {d.parameter} {d.current_value}->"
                             f"{d.target_value}: {d.reason}" for d in self.decisions[-15:])
            raise AssertionError(f"{exc}\nthe newest decisions:\n{said or '  none'}") from None

    def commits(self) -> list[TaskMetrics]:
        """The committed batches with rows, of any instance."""
        return [m for m in self.metrics if m.batch_id >= 0 and m.input_rows > 0]

    def sent(self) -> list[Decision]:
        """The decisions that sent a control tuple (the controller also logs how each ended,
        as `ack_…` decisions under the same control id)."""
        return [d for d in self.decisions if d.control_id and not d.action.startswith("ack_")]

    def takeovers(self) -> list[Decision]:
        """The controller instances' takeovers, oldest first."""
        return [d for d in self.decisions if d.action == TAKEOVER]

    def applied(self) -> list[Ack]:
        return [a for a in self.acks if a.outcome is Outcome.APPLIED]

    def lag_records(self, query_id: str | None = None, topic: str | None = None) -> int:
        """Records of the query's input topic no committed batch has read yet (default: the
        first query and the bed's input topic)."""
        view = self.views[query_id] if query_id else self.view
        return view.lag_records(self.tail.log_end_total(topic or self.topics["input"]))

    def close(self) -> None:
        self.tail.close()
