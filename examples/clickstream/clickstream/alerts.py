"""click-alerts: sessionized clicks (JSON) → a verdict per click, plain Avro.

Stateless. Each click goes through an abuse check, a remote call of `check_cost_ms`, in the
Kafka source's tasks (input parallelism is the knob). The rule is a registered function with
two versions (`udf_version`): v1 flags a high bot score, v2 also long sessions. Load shedding
may drop the clicks the job marks low priority: the ones the bot model already cleared.
"""

import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streaming_jobs.api import Avro, Job, JobContext, Json, Setting, Topics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SCHEMAS = Path(__file__).parent / "schemas"
SESSION_CLICK = ("event_id string not null, user_id string not null, page string not null, "
                 "section string, ts long not null, session_id string not null, "
                 "session_click long, session_age_ms long, bot_score double")


def rule_v1(click: Mapping[str, Any]) -> str:
    return "bot score" if (click["bot_score"] or 0.0) >= 0.8 else ""


def rule_v2(click: Mapping[str, Any]) -> str:
    return rule_v1(click) or ("long session" if (click["session_click"] or 0) > 500 else "")


def check(batches: Iterator[pa.RecordBatch], rule: Callable[[Mapping[str, Any]], str],
          version: str, cost_ms: float) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        clicks = batch.to_pylist()
        if cost_ms > 0 and clicks:
            time.sleep(len(clicks) * cost_ms / 1000.0)  # the abuse service's latency
        reasons = [rule(c) for c in clicks]
        yield pa.RecordBatch.from_pylist([
            {"event_id": c["event_id"], "user_id": c["user_id"], "session_id": c["session_id"],
             "page": c["page"], "ts": c["ts"], "alert": bool(r), "reason": r,
             "rule_version": version} for c, r in zip(clicks, reasons, strict=True)],
            schema=VERDICT)


VERDICT = pa.schema([("event_id", pa.string()), ("user_id", pa.string()),
                     ("session_id", pa.string()), ("page", pa.string()), ("ts", pa.int64()),
                     ("alert", pa.bool_()), ("reason", pa.string()),
                     ("rule_version", pa.string())])


def build(spark: "SparkSession", clicks: "DataFrame", context: JobContext) -> "DataFrame":
    rule = context.function
    assert rule is not None
    cost_ms = float(context.settings["check_cost_ms"])
    # `rule.version` is read in the task: the version in force for its batch.
    return clicks.mapInArrow(lambda batches: check(batches, rule, rule.version, cost_ms),
                             "event_id string, user_id string, session_id string, "
                             "page string, ts long, alert boolean, reason string, "
                             "rule_version string")


def cleared(click: Mapping[str, Any], _settings: Mapping[str, Any]) -> bool:
    return (click["bot_score"] or 0.0) < 0.1


job = Job(
    name="click-alerts",
    description="sessionized clicks → an abuse verdict per click (a check per click)",
    build=build,
    input=Json(SESSION_CLICK),
    output=Avro(SCHEMAS / "click_verdict.avsc", framing="plain", key="user_id"),
    topics=Topics(input="clicks-sessionized", output="click-alerts"),
    functions={"v1": rule_v1, "v2": rule_v2},
    settings=(Setting("check_cost_ms", 5.0, "the abuse check's latency per click, ms"),),
    low_priority=cleared,
)
