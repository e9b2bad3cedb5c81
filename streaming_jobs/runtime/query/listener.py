"""Spark's `StreamingQueryListener`, reduced to the callbacks the runtime supplies.

Owns only the adaptation to pyspark's listener interface (events arrive on Spark's listener
bus thread). Neighbours: `lifecycle` supplies the callbacks and filters by run id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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
