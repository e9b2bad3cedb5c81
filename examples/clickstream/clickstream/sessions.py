"""click-sessions: enriched clicks → per-user sessions, each click scored by a bot model.

Stateful, per user (`applyInPandasWithState`): a click more than `session_gap_s` of event time
after the user's previous one starts a new session. Every click comes out once, with its
session, its number in it and a bot score from a model-serving call (`model_cost_ms` per
click, made by the stateful operator's tasks: the capacity grows with the state partitions).
Two versions of the model are registered (`udf_version` v1, v2). A user idle for longer than
the gap is forgotten when the watermark passes.

Safe to reconfigure: within a batch a user's clicks are taken in (ts, event_id) order, so a
replayed batch gives the same sessions and scores from the same state.
"""

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streaming_jobs.api import (
    STATE_PARTITIONS,
    Avro,
    Job,
    JobContext,
    Json,
    Setting,
    SwappableFunction,
    Topics,
)

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.state import GroupState

SCHEMAS = Path(__file__).parent / "schemas"
SESSION_CLICK = ("event_id string, user_id string, page string, section string, ts long, "
                 "session_id string, session_click long, session_age_ms long, "
                 "bot_score double, model string")
STATE = "sessions long, session_start long, last_ts long, clicks long"


def bot_score_v1(clicks: int, age_ms: int, section: str) -> float:
    """Fast clicking early in a session looks automated."""
    per_minute = clicks / max(age_ms / 60_000, 1 / 60)
    return 1 / (1 + math.exp(-(per_minute - 40) / 8))


def bot_score_v2(clicks: int, age_ms: int, section: str) -> float:
    """v1, and checkout pages without browsing first look worse."""
    score = bot_score_v1(clicks, age_ms, section)
    return min(1.0, score + (0.2 if section == "checkout" and clicks <= 2 else 0.0))


@dataclass(frozen=True)
class Sessionize:
    """The function Spark calls per user and batch (picklable)."""

    gap_ms: int
    model: SwappableFunction
    """(clicks, age_ms, section) -> bot score, of the version in force for the batch."""
    cost_ms: float

    def __call__(self, key: tuple[Any, ...], frames: Iterator["pd.DataFrame"],
                 state: "GroupState") -> Iterator["pd.DataFrame"]:
        import pandas as pd

        if state.hasTimedOut:
            state.remove()
            return
        clicks = pd.concat([f for f in frames if len(f)] or [pd.DataFrame()])
        if clicks.empty:
            return
        sessions, start, last, count = state.get if state.exists else (0, 0, -(2**62), 0)
        rows, version = [], self.model.version
        for c in clicks.sort_values(["ts", "event_id"], kind="stable").itertuples(index=False):
            if c.ts - last > self.gap_ms:
                sessions, start, count = sessions + 1, int(c.ts), 0
            count, last = count + 1, max(last, int(c.ts))
            age = int(c.ts) - start
            rows.append((c.event_id, c.user_id, c.page, c.section, int(c.ts),
                         f"{c.user_id}/{sessions}", count, age,
                         self.model(count, age, c.section), version))
        time.sleep(len(rows) * self.cost_ms / 1000.0)  # the model service's latency
        state.update((sessions, start, last, count))
        state.setTimeoutTimestamp(max(last + self.gap_ms, state.getCurrentWatermarkMs() + 1))
        yield pd.DataFrame(rows, columns=[c.split()[0] for c in SESSION_CLICK.split(", ")])


def build(spark: "SparkSession", clicks: "DataFrame", context: JobContext) -> "DataFrame":
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    assert context.function is not None
    settings = context.settings
    sessionize = Sessionize(int(settings["session_gap_s"] * 1000), context.function,
                            float(settings["model_cost_ms"]))
    return (clicks.withColumn("event_time", F.timestamp_millis("ts"))
            .withWatermark("event_time", f"{settings['watermark_s']} seconds")
            .groupBy("user_id")
            .applyInPandasWithState(sessionize, SESSION_CLICK, STATE, "append",
                                    GroupStateTimeout.EventTimeTimeout))


job = Job(
    name="click-sessions",
    description="enriched clicks → per-user sessions, each click scored by a bot model",
    build=build,
    input=Avro(SCHEMAS / "enriched_click.avsc"),
    output=Json(key="user_id"),
    topics=Topics(input="clicks-enriched", output="clicks-sessionized"),
    stateful=True,
    scales_with=STATE_PARTITIONS,
    functions={"v1": bot_score_v1, "v2": bot_score_v2},
    settings=(
        Setting("model_cost_ms", 5.0, "the bot model's latency per click, ms"),
        Setting("session_gap_s", 1800, "event-time gap that starts a new session, s"),
        Setting("watermark_s", 60, "allowed event-time lateness of a click, s"),
    ),
)
