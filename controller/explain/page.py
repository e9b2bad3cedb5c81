"""The controller's live page: per query, what arrives against what it can take, the backlog
and the size over the last minutes, each decision and ack marked with its reason, the delay a
record arriving now meets and whether each objective the job states is met.

Owns `Timeline` (a loop observer that keeps, per query, a bounded series of the model's
figures and the newest marks; it keeps nothing else, so the page needs no second database)
and `routes` (the WSGI app that serves the page at `/ui` and its data at `/api/queries`,
`?filter=…&limit=…` for only what the page draws, beside the Prometheus endpoint with its TLS
and basic auth). The page itself (`page.html`) is one file with its script and styles inline:
no CDN, nothing fetched but the data. Neighbours: `prom` (the same observations as metrics),
`controller.app` (serves both).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from controller.core.model import QueryModel
from controller.core.objectives import Standing
from controller.core.outage import Outage

POINT_MS = 500
"""One point per query per half second of the clock (cycles run sooner when records arrive):
a later figure in the same half second replaces it."""
POINTS = 720
"""Points kept per query: six minutes."""
SHOWN = 50
"""Queries `/api/queries` returns unless asked for fewer or more (at most `MAX_SHOWN`): the
page draws what it asks for, however large the fleet."""
MAX_SHOWN = 500
MARKS = 40
"""Decisions and acks kept per query, newest last."""

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass
class _Query:
    points: deque[tuple[int, float, float, float, int]] = field(
        default_factory=lambda: deque(maxlen=POINTS))
    """(ms, arrival records/s, capacity records/s at the current size, backlog, units)."""
    marks: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MARKS))
    knob: str = ""
    utilisation: float = math.nan
    desired: int | None = None
    standbys: int = 0
    state: str = "running"
    sources: tuple[str, ...] = ()
    sinks: tuple[str, ...] = ()
    delay_s: float | None = None
    objectives: tuple[Standing, ...] = ()


class Timeline:
    """Implements `controller.loop.ports.LoopObserver`; thread-safe (the loop writes, the
    HTTP server's threads read)."""

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._queries: dict[str, _Query] = {}
        self._lock = threading.Lock()
        self._leading = False

    def _query(self, query_id: str) -> _Query:
        return self._queries.setdefault(query_id, _Query())

    def modelled(self, model: QueryModel, desired: int | None) -> None:
        now = self._clock_ms()
        point = (now, _finite(model.arrival_rate), _finite(model.capacity),
                 _finite(model.backlog_records), model.parallelism)
        with self._lock:
            q = self._query(model.query_id)
            if q.points and q.points[-1][0] // POINT_MS == now // POINT_MS:
                q.points[-1] = point
            else:
                q.points.append(point)
            q.knob, q.utilisation, q.desired = model.knob, model.utilisation, desired
            q.sources, q.sinks = model.source_topics, model.sink_topics
            q.delay_s = _finite(model.delay_s, None)
            q.objectives = model.standings()

    def decided(self, query_id: str, action: str, reason: str, at_ms: int) -> None:
        self._mark(query_id, {"kind": "decision", "at_ms": at_ms, "action": action,
                              "text": reason})

    def acked(self, query_id: str, outcome: str, pause_ms: int) -> None:
        self._mark(query_id, {"kind": "ack", "at_ms": self._clock_ms(), "action": outcome,
                              "text": f"{outcome.lower()}, paused {pause_ms / 1000:.1f} s"})

    def ack_timed_out(self, query_id: str) -> None:
        self._mark(query_id, {"kind": "ack", "at_ms": self._clock_ms(), "action": "TIMEOUT",
                              "text": "no ack within the ack timeout"})

    def _mark(self, query_id: str, mark: dict[str, Any]) -> None:
        with self._lock:
            self._query(query_id).marks.append(mark)

    def lost(self, query_ids: list[str]) -> None:
        self._states(query_ids, "lost")

    def down(self, action: str, query_ids: list[str]) -> None:
        self._states(query_ids, action)

    def _states(self, query_ids: list[str], state: str) -> None:
        """`state` for `query_ids`, every cycle: a query no longer among them runs again."""
        with self._lock:
            for query_id, q in self._queries.items():
                if query_id in query_ids:
                    q.state = state
                elif q.state == state:
                    q.state = "running"

    def standbys(self, query_id: str, count: int) -> None:
        with self._lock:
            self._query(query_id).standbys = count

    def leadership(self, instance_id: str, led: int, shards: int, since_ms: int) -> None:
        with self._lock:
            self._leading = led > 0

    def forget(self, query_ids: Collection[str]) -> None:
        with self._lock:
            for query_id in query_ids:
                self._queries.pop(query_id, None)

    def outage(self, query_id: str, outage: Outage) -> None:
        pass

    def metrics_received(self, count: int) -> None:
        pass

    def behind(self, seconds: float, judging: bool) -> None:
        pass

    def recommended(self, action: str) -> None:
        pass

    def probe_failed(self) -> None:
        pass

    def snapshot(self, matching: str = "", limit: int = SHOWN) -> dict[str, Any]:
        """What `/api/queries` returns: the first `limit` queries whose id contains
        `matching`, in pipeline order (a query whose output another reads comes before it),
        the rest busiest first; only those carry their series."""
        with self._lock:
            summaries = [{"query_id": query_id, "state": q.state, "knob": q.knob,
                          "units": q.points[-1][4] if q.points else None,
                          "desired": q.desired, "utilisation": _finite(q.utilisation, None),
                          "standbys": q.standbys, "sources": list(q.sources),
                          "sinks": list(q.sinks), "delay_s": q.delay_s,
                          "objectives": [_objective(s) for s in q.objectives]}
                         for query_id, q in self._queries.items()]
            shown = [s for s in pipeline_order(summaries) if matching in s["query_id"]]
            total, found, shown = len(summaries), len(shown), shown[:limit]
            for s in shown:
                q = self._queries[s["query_id"]]
                s["points"], s["marks"] = [list(p) for p in q.points], _marks_in(q)
            leading = self._leading
        return {"now_ms": self._clock_ms(), "leading": leading, "total": total,
                "matching": found, "queries": shown}


def _objective(standing: Standing) -> dict[str, Any]:
    return {"objective": standing.objective, "bound_s": standing.bound_s,
            "value_s": _finite(standing.value_s, None), "met": standing.met,
            "text": standing.describe()}


def _marks_in(q: _Query) -> list[dict[str, Any]]:
    """The marks the chart spans: all of them until the series rolls over, then those since
    its first point."""
    if len(q.points) < POINTS:
        return list(q.marks)
    return [m for m in q.marks if m["at_ms"] >= q.points[0][0]]


def pipeline_order(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Busiest first, then each query moved after every query that writes what it reads."""
    busiest = sorted(queries, key=lambda q: (-(q["utilisation"] or 0.0), q["query_id"]))
    writers = {topic: q["query_id"] for q in busiest for topic in q["sinks"]}
    placed: list[dict[str, Any]] = []
    seen: set[str] = set()
    by_id = {q["query_id"]: q for q in busiest}

    def place(q: dict[str, Any], path: frozenset[str]) -> None:
        if q["query_id"] in seen or q["query_id"] in path:  # a cycle: leave it where it is
            return
        for topic in q["sources"]:
            upstream = writers.get(topic)
            if upstream is not None and upstream != q["query_id"]:
                place(by_id[upstream], path | {q["query_id"]})
        if q["query_id"] not in seen:
            seen.add(q["query_id"])
            placed.append(q)
    for q in busiest:
        place(q, frozenset())
    return placed


def _finite(value: float | None, default: float | None = 0.0) -> Any:
    """`value` where JSON can carry it, else `default` (None stays None)."""
    return value if value is None or math.isfinite(value) else default


def routes(timeline: Timeline, rest: WsgiApp) -> WsgiApp:
    """`/ui` the page, `/api/queries` its data, anything else `rest` (Prometheus)."""
    page = resources.files("controller.explain").joinpath("page.html").read_bytes()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/ui", "/ui/"):
            return _reply(start_response, "text/html; charset=utf-8", page)
        if path == "/api/queries":
            asked = parse_qs(environ.get("QUERY_STRING", ""))
            limit = asked.get("limit", [""])[0]
            snapshot = timeline.snapshot(asked.get("filter", [""])[0], min(
                int(limit) if limit.isdigit() else SHOWN, MAX_SHOWN))
            body = json.dumps(snapshot, separators=(",", ":")).encode()
            return _reply(start_response, "application/json", body)
        return rest(environ, start_response)
    return app


def _reply(start_response: Callable[..., Any], content_type: str,
           body: bytes) -> list[bytes]:
    start_response("200 OK", [("Content-Type", content_type),
                              ("Content-Length", str(len(body))),
                              ("Cache-Control", "no-store")])
    return [body]
