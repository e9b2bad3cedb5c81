"""What `worker_pool` warms: how many workers a task holds, and what they import."""

from __future__ import annotations

from streaming_jobs.jobs.sensor_averages import job
from streaming_jobs.runtime.query.worker_pool import modules_of, python_operators

SENSOR_PLAN = """\
~Project [sensor_id#26, region#32]
+- ~Aggregate [window#50-T10000ms, sensor_id#26], [max_by(region#30, event_time_ms#27L)]
   +- ~EventTimeWatermark 8753, event_time#31: timestamp, 10 seconds
      +- ~MapInArrow enrich_batches(sensor_id#15, event_time_ms#16L)#25, [sensor_id#26]
         +- ~Filter (NOT dead_letter#19 AND NOT shed#20)
            +- ~CollectMetrics streamctl_input, [sum(cast(shed#20 as bigint)) AS rows_shed#]
               +- ~MapInArrow InputStep(key#7, value#8, topic#9)#14, [sensor_id#15]
                  +- ~StreamingRelationV2 org.apache.spark.sql.kafka010.KafkaSourceProvider
"""
"""The sensor job's analyzed plan as Spark 4.3 prints it (abridged)."""


def test_each_python_operator_of_a_plan_holds_a_worker_of_its_own() -> None:
    assert python_operators(SENSOR_PLAN) == 2  # the decode step, the enrichment
    grouped = "FlatMapGroupsInPandas [k#1], f(k#1)#2\n+- ArrowEvalPython [g(x#3)]\n"
    assert python_operators(grouped) == 2
    assert python_operators("Project [a#1]\n+- LocalRelation [a#1]\n") == 1  # at least one
    assert python_operators("Project [MapInArrowish#1]\n") == 1  # a column, not a node


def test_the_modules_a_jobs_workers_import_are_the_decode_step_its_formats_and_builder(
) -> None:
    assert modules_of(job) == ("streaming_jobs.runtime.query.input",
                               "streaming_jobs.formats.avro_format",
                               "streaming_jobs.jobs.sensor_averages")
