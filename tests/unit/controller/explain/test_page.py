"""The live page's timeline and routes: what the loop observed, in pipeline order, served."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from controller.core.model import QueryModel
from controller.explain.page import POINT_MS, POINTS, Timeline, pipeline_order, routes
from controller.loop.ports import LoopObserver
from schemas.objectives import Objectives

MODEL = QueryModel(
    query_id="b", samples=10, config_epoch=0, arrival_rate=700, throughput=400,
    busy_ratio=0.98, rate_per_unit=200, parallelism=2, units=2, source_partitions=2,
    task_slots=16, backlog_records=6_000, backlog_trend_records_per_s=300,
    time_to_drain_s=math.inf, batch_overhead_s=1.5, source_topics=("a-out",),
    sink_topics=("b-out",))


class Clock:
    def __init__(self, step_ms: int = POINT_MS) -> None:
        self.ms, self.step_ms = 1_700_000_000_000, step_ms

    def __call__(self) -> int:
        self.ms += self.step_ms
        return self.ms


def test_each_cycle_adds_a_point_and_decisions_and_acks_are_marked_with_their_reason() -> None:
    timeline = Timeline(Clock())
    timeline.modelled(MODEL, 4)
    timeline.decided("b", "scale_up", "backlog 6 000 records growing", 1_700_000_000_700)
    timeline.acked("b", "APPLIED", 4_200)
    timeline.modelled(replace(MODEL, parallelism=4, backlog_records=1_000), None)
    [query] = timeline.snapshot()["queries"]
    assert [p[1:] for p in query["points"]] == [[700, 400, 6_000, 2], [700, 400, 1_000, 4]]
    assert query["units"] == 4 and query["standbys"] == 0 and query["state"] == "running"
    assert [(m["kind"], m["action"], m["text"]) for m in query["marks"]] == [
        ("decision", "scale_up", "backlog 6 000 records growing"),
        ("ack", "APPLIED", "applied, paused 4.2 s")]


def test_each_query_shows_its_delay_and_where_it_stands_against_each_stated_objective() -> None:
    timeline = Timeline(Clock())
    timeline.modelled(replace(MODEL, trigger_interval_s=2.0,
                              objectives=Objectives(max_delay_s=30)), None)
    timeline.modelled(replace(MODEL, query_id="c", trigger_interval_s=2.0, rate_per_unit=0),
                      None)
    by_id = {q["query_id"]: q for q in timeline.snapshot()["queries"]}
    assert by_id["b"]["delay_s"] == 17  # 6 000 behind at 400/s, plus a 2 s batch
    assert by_id["b"]["objectives"] == [{
        "objective": "max_delay_s", "bound_s": 30, "value_s": 17, "met": True,
        "text": "delay 17 s of at most 30 s: met"}]
    assert by_id["c"]["delay_s"] is None and by_id["c"]["objectives"] == []


def test_the_series_is_bounded_and_so_are_the_marks_it_spans() -> None:
    clock = Clock()
    timeline = Timeline(clock)
    timeline.decided("b", "scale_up", "before the series", clock.ms - 2000)
    timeline.modelled(MODEL, None)
    assert len(timeline.snapshot()["queries"][0]["marks"]) == 1  # the first cycle's decision
    for _ in range(POINTS + 10):
        timeline.modelled(replace(MODEL, arrival_rate=math.nan), None)
    [query] = json.loads(json.dumps(timeline.snapshot()))["queries"]
    assert len(query["points"]) == POINTS and query["points"][0][1] == 0.0
    assert query["marks"] == []  # older than the series once it rolled over


def test_a_query_keeps_one_point_per_half_second_the_newest() -> None:
    timeline = Timeline(Clock(step_ms=100))
    for backlog in range(12):  # 1.2 s of cycles
        timeline.modelled(replace(MODEL, backlog_records=backlog), None)
    points = timeline.snapshot()["queries"][0]["points"]
    assert [p[3] for p in points] == [3, 8, 11]  # the newest of each half second


def test_a_query_reads_lost_stopped_or_halted_while_reported_so_then_running() -> None:
    timeline = Timeline(Clock())
    timeline.modelled(MODEL, None)

    def state() -> str:
        return str(timeline.snapshot()["queries"][0]["state"])
    timeline.lost(["b"])
    assert state() == "lost"
    timeline.lost([])
    assert state() == "running"
    timeline.down("stopped", ["b"])
    assert state() == "stopped"
    timeline.down("halted", ["b"])
    timeline.down("stopped", [])
    assert state() == "halted"
    timeline.down("halted", [])
    assert state() == "running"


def test_the_data_holds_the_series_of_the_matching_queries_only_up_to_the_limit() -> None:
    timeline = Timeline(Clock())
    for n in range(5):
        timeline.modelled(replace(MODEL, query_id=f"q{n}", source_topics=(),
                                  sink_topics=(), arrival_rate=100 * n), None)
    timeline.modelled(replace(MODEL, query_id="other"), None)
    data = timeline.snapshot("q", limit=2)
    assert (data["total"], data["matching"]) == (6, 5)
    assert [q["query_id"] for q in data["queries"]] == ["q4", "q3"]  # busiest first
    assert all(len(q["points"]) == 1 for q in data["queries"])


def query(query_id: str, utilisation: float, sources: Iterable[str] = (),
          sinks: Iterable[str] = ()) -> dict[str, Any]:
    return {"query_id": query_id, "utilisation": utilisation, "sources": list(sources),
            "sinks": list(sinks)}


def test_pipeline_order_puts_each_writer_before_its_readers_and_the_rest_busiest_first() -> None:
    ordered = pipeline_order([
        query("c", 2.0, ["b-out"], ["c-out"]), query("lone", 0.5),
        query("a", 0.1, ["in"], ["a-out"]), query("b", 0.9, ["a-out"], ["b-out"]),
        query("busy", 1.5)])
    assert [q["query_id"] for q in ordered] == ["a", "b", "c", "busy", "lone"]
    looped = pipeline_order([query("x", 1.0, ["y-out"], ["x-out"]),
                             query("y", 0.5, ["x-out"], ["y-out"])])
    assert sorted(q["query_id"] for q in looped) == ["x", "y"]


def call(app: Callable[..., Iterable[bytes]], path: str,
         query: str = "") -> tuple[str, bytes]:
    status: list[Any] = []
    body = b"".join(app({"PATH_INFO": path, "QUERY_STRING": query},
                        lambda s, headers: status.append((s, headers))))
    return dict(status[0][1])["Content-Type"], body


def test_the_page_and_its_data_are_served_and_every_other_path_goes_to_prometheus() -> None:
    timeline = Timeline(Clock())
    timeline.modelled(MODEL, None)

    def prometheus(environ: dict[str, Any], start: Callable[..., Any]) -> list[bytes]:
        start("200 OK", [("Content-Type", "text/plain")])
        return [b"metrics"]
    app = routes(timeline, prometheus)
    kind, page = call(app, "/ui")
    assert kind.startswith("text/html") and b"/api/queries" in page and b"http" not in page.split(
        b"<script>")[1].replace(b"http://www.w3.org/2000/svg", b"")  # nothing fetched elsewhere
    kind, data = call(app, "/api/queries")
    assert kind == "application/json" and json.loads(data)["queries"][0]["query_id"] == "b"
    assert json.loads(call(app, "/api/queries", "filter=zzz&limit=5")[1])["queries"] == []
    assert call(app, "/metrics") == ("text/plain", b"metrics")


def test_the_timeline_answers_every_call_the_loop_makes_of_its_observer() -> None:
    calls = [name for name in vars(LoopObserver) if not name.startswith("_")]
    assert "modelled" in calls
    assert [name for name in calls if not callable(getattr(Timeline(), name, None))] == []

