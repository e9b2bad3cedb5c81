"""Spark's `StreamingQueryListener`, reduced to the callbacks the runtime supplies.

Owns only the adaptation to pyspark's listener interface (events arrive on Spark's listener
bus thread), and how an event crosses from the JVM: as one JSON string. Neighbours:
`lifecycle` supplies the callbacks and filters by run id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
    StreamingQueryProgress,
)

log = logging.getLogger(__name__)


class ProgressListener(StreamingQueryListener):
    """Forwards progress and idle events; an exception in a callback is logged, never kills
    the bus. Spark (3.5+) posts an idle event instead of a progress event while a query has no
    new data (at most every `spark.sql.streaming.noDataProgressEventInterval`, 10 s)."""

    def __init__(self, on_progress: Callable[[StreamingQueryProgress], None],
                 on_idle: Callable[[str, str], None]) -> None:
        self._on_progress = on_progress
        self._on_idle = on_idle

    @property
    def _jlistener(self) -> Any:
        """The JVM side `addListener` registers: pyspark's own wrapper class, around a bridge
        that reads each progress event as one JSON string (`JsonEvents`)."""
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext

            jvm: Any = SparkContext._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(JsonEvents(self))
        return self._jlistenerobj

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            self._on_progress(event.progress)
        except Exception:
            log.exception("handling progress of batch %s failed", event.progress.batchId)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        try:
            self._on_idle(str(event.runId), event.timestamp)
        except Exception:
            log.exception("handling the idle event of run %s failed", event.runId)

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass


class JsonEvents:
    """The Py4J object Spark's listener bus calls: each progress event crosses as one JSON
    string (two Py4J calls) and is rebuilt with `fromJson`.

    pyspark's own bridge rebuilds it field by field (`fromJObject`): a Py4J round trip per
    field, map entry and operator, and a pickled row per observed metric. Measured on the
    2-core machine with a stateful query's event: 90–99 ms per event (15 ms of it the
    Python driver's CPU) against 0.4–0.9 ms, so each batch's commit reached the gate, the
    ack's pause and the metrics topic about 0.1 s later than Spark posted it. Start and
    termination events are not used by the runtime and are not converted at all.
    """

    def __init__(self, listener: ProgressListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        progress = json.loads(jevent.progress().json())
        self._listener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))

    def onQueryIdle(self, jevent: Any) -> None:
        self._listener.onQueryIdle(QueryIdleEvent.fromJObject(jevent))

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
