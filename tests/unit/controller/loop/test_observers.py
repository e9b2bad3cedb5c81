"""`Observers`: several loop observers as one."""

from __future__ import annotations

from controller.loop.ports import LoopObserver, NullObserver, Observers


class Recording(NullObserver):
    def __init__(self, name: str, calls: list[tuple[str, str, str]]) -> None:
        self.name, self.calls = name, calls

    def decided(self, query_id: str, action: str, reason: str, at_ms: int) -> None:
        self.calls.append((self.name, "decided", action))

    def lost(self, query_ids: list[str]) -> None:
        self.calls.append((self.name, "lost", ",".join(query_ids)))


def test_each_call_goes_to_every_observer_in_the_order_given() -> None:
    calls: list[tuple[str, str, str]] = []
    both: LoopObserver = Observers(Recording("prometheus", calls), Recording("page", calls))
    both.decided("q", "scale_up", "why", 1)
    both.lost(["q", "r"])
    assert calls == [("prometheus", "decided", "scale_up"), ("page", "decided", "scale_up"),
                     ("prometheus", "lost", "q,r"), ("page", "lost", "q,r")]


def test_observers_answer_every_call_of_the_loop_observer_protocol() -> None:
    calls = [name for name in vars(LoopObserver) if not name.startswith("_")]
    assert "leadership" in calls
    assert [name for name in calls if name not in vars(Observers)] == []
