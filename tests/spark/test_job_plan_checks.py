"""A job's builder is called on the real Kafka source and its columns checked against the job's
output format when the job is loaded, before Spark runs a batch: each way it can be wrong is
a `PlanError` naming the job and the problem. Nothing is read from Kafka (no query starts)."""

from __future__ import annotations

from typing import Any

import pytest

from streaming_jobs.api import Avro, Job, Json, KeyValue, Topics
from streaming_jobs.config import JobConfig, bind, grouped
from streaming_jobs.runtime.query.input import DiscardDeadLetters
from streaming_jobs.runtime.query.plan import Plan, PlanError

pytestmark = [pytest.mark.spark]

CLICK = "user_id string not null, page string, ts long"
PAGE_VIEW = {"type": "record", "name": "PageView", "namespace": "test", "fields": [
    {"name": "user_id", "type": "string"}, {"name": "page", "type": "string"},
    {"name": "views", "type": "long"}]}


def plan_of(build: Any, output: Any = None) -> tuple[Plan, JobConfig]:
    job = Job(name="views", build=build, input=Json(CLICK), topics=Topics("clicks", "views"),
              output=output or KeyValue())
    return Plan(job), bind(grouped(dict(bootstrap_servers="127.0.0.1:1", job="views",
                                     checkpoint_dir="/unused")), job)


def load(spark: Any, build: Any, output: Any = None) -> str:
    plan, config = plan_of(build, output)
    with pytest.raises(PlanError) as caught:
        plan.build(spark, config.run, config.initial_state(), DiscardDeadLetters())
    return str(caught.value)


def test_a_builder_whose_columns_fit_the_output_is_accepted(spark: Any) -> None:
    plan, config = plan_of(lambda spark, clicks, ctx: clicks.selectExpr(
        "user_id", "page", "CAST(1 AS INT) AS views"), Avro(PAGE_VIEW, key="user_id"))
    output = plan.build(spark, config.run, config.initial_state(), DiscardDeadLetters())
    assert output.isStreaming and output.columns == ["user_id", "page", "views"]


def test_the_source_has_the_input_formats_columns(spark: Any) -> None:
    seen = {}

    def build(spark: Any, clicks: Any, context: Any) -> Any:
        seen["schema"] = clicks.schema.simpleString()
        seen["context"] = context
        return clicks.selectExpr("user_id AS key", "page AS value")

    plan, config = plan_of(build)
    plan.build(spark, config.run, config.initial_state(), DiscardDeadLetters())
    assert seen["schema"] == "struct<user_id:string,page:string,ts:bigint>"
    assert seen["context"].query_id == "views" and seen["context"].function is None


@pytest.mark.parametrize(("build", "output", "message"), [
    (lambda spark, clicks, ctx: clicks.select("user_id", "page"),
     Avro(PAGE_VIEW, key="user_id"),
     "job 'views': the builder's columns (user_id, page) do not fit its output, Avro "
     "single-object test.PageView"),
    (lambda spark, clicks, ctx: clicks.selectExpr("user_id", "page", "'many' AS views"),
     Avro(PAGE_VIEW), "column 'views' is string, the field needs long"),
    (lambda spark, clicks, ctx: clicks, None,
     "no 'value' column (got user_id, page, ts); return key/value columns, or declare "
     "output=Json(…) or Avro(…)"),
    (lambda spark, clicks, ctx: clicks, Json(key="session"),
     "the key column 'session' is not among the output columns (user_id, page, ts)"),
    (lambda spark, clicks, ctx: spark.range(3).selectExpr("CAST(id AS STRING) AS value"), None,
     "job 'views': its builder returned a batch DataFrame; build the output from the source "
     "it was given"),
    (lambda spark, clicks, ctx: clicks.collect(), None,
     "job 'views': its builder failed: AnalysisException"),
    (lambda spark, clicks, ctx: clicks.select("no_such_column"), None,
     "job 'views': its builder failed: AnalysisException: [UNRESOLVED_COLUMN"),
    (lambda spark, clicks, ctx: "a string", None,
     "job 'views': its builder returned str, not a DataFrame"),
])
def test_each_wrong_builder_is_named_before_a_batch_runs(spark: Any, build: Any, output: Any,
                                                         message: str) -> None:
    assert message in load(spark, build, output)
