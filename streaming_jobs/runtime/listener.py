"""Spark's `StreamingQueryListener`, reduced to two callbacks the runtime supplies.

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
    """Forwards progress events; an exception in a callback is logged, never kills the bus."""

    def __init__(self, on_progress: Callable[[StreamingQueryProgress], None]) -> None:
        self._on_progress = on_progress

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            self._on_progress(event.progress)
        except Exception:
            log.exception("handling progress of batch %s failed", event.progress.batchId)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass
