"""The public job API refuses a wrong declaration at import time, naming the job and the fix:
a missing or ill-shaped builder, an unknown knob, duplicate settings, bad formats and topics."""

from __future__ import annotations

import math
from typing import Any

import pytest

from streaming_jobs.api import (
    Avro,
    Job,
    JobDefinitionError,
    Json,
    KeyValue,
    Objectives,
    Setting,
    Topics,
)

SCHEMA = "user_id string not null, page string, ts long"


def build(spark: Any, source: Any, context: Any) -> Any:
    return source


def declare(**changes: Any) -> Job:
    fields: dict[str, Any] = {"name": "clicks", "build": build, "input": Json(SCHEMA),
                              "topics": Topics("clicks", "clean-clicks")}
    return Job(**{**fields, **changes})


def test_a_minimal_declaration_takes_the_defaults() -> None:
    job = declare()
    assert isinstance(job.output, KeyValue)
    assert (job.output_mode, job.stateful, job.scales_with) == ("append", False,
                                                                 "input_parallelism")
    assert job.topics.resolved_dead_letters() == "clicks.dlq"
    assert job.initial_udf_version == "" and job.low_priority is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"build": None}, "job 'clicks': it has no builder: pass build=(spark, source, context) "
                      "-> DataFrame"),
    ({"build": "build"}, "build must be a function (spark, source, context) -> DataFrame, "
                         "got str"),
    ({"build": lambda spark, source: source}, "build must take (spark, source, context); "
                                              "<lambda>(spark, source) does not"),
    ({"scales_with": "executors"}, "scales_with names an unknown knob 'executors'; a job's "
                                   "capacity grows with one of input_parallelism, "
                                   "state_partitions"),
    ({"scales_with": "state_partitions"}, "scales_with='state_partitions' needs stateful=True"),
    ({"settings": (Setting("cost_ms", 1.0), Setting("cost_ms", 2.0))},
     "setting 'cost_ms' is declared more than once"),
    ({"settings": (Setting("query_id", "x"),)}, "setting 'query_id' has the name of a runtime "
                                                "option; rename it"),
    ({"settings": (Setting("Cost", 1),)}, "setting 'Cost': a name is lower_case letters"),
    ({"output_mode": "upsert"}, "output_mode must be one of append, update, complete, got "
                                "'upsert'"),
    ({"functions": {"v1": len}, "default_function": "v2"},
     "default_function 'v2' is not one of the versions: v1"),
    ({"functions": {"v 1": len}}, "function version 'v 1' must be 1-100 of [A-Za-z0-9._-]"),
    ({"topics": Topics("clicks", "clicks")}, "the input and output topics are both 'clicks'"),
    ({"topics": Topics("clicks", "out put")}, "topics.output: 'out put' is not a Kafka topic "
                                              "name"),
    ({"input": KeyValue()}, "input must be a format (Json(…), Avro(…)), got KeyValue()"),
    ({"name": "no spaces"}, "the name must be 1-100 of [A-Za-z0-9._-]"),
    ({"state_version": 0}, "state_version must be a positive integer, got 0"),
    ({"objectives": Objectives(max_delay_s=math.nan)},
     "objectives: max_delay_s must be a number >= 0 (0: none stated), got nan"),
    ({"objectives": {"max_delay_s": 30}}, "objectives must be Objectives(…)"),
])
def test_a_wrong_declaration_names_the_job_and_the_problem(changes: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(JobDefinitionError) as caught:
        declare(**changes)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"job {changes.get('name', 'clicks')!r}: ")


def test_every_problem_of_a_declaration_is_named_at_once() -> None:
    with pytest.raises(JobDefinitionError) as caught:
        declare(build=None, scales_with="cores")
    assert "has no builder" in str(caught.value) and "unknown knob 'cores'" in str(caught.value)


def test_bad_format_schemas_are_refused_where_they_are_written() -> None:
    with pytest.raises(ValueError, match="unknown type 'strng'"):
        Json("user_id strng")
    with pytest.raises(ValueError, match="not a valid Avro schema"):
        Avro({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]})
    with pytest.raises(ValueError, match="a union of several non-null types"):
        Avro({"type": "record", "name": "X",
              "fields": [{"name": "a", "type": ["null", "int", "string"]}]})
    with pytest.raises(ValueError, match="framing must be one of single-object, plain"):
        Avro({"type": "record", "name": "X", "fields": []}, framing="confluent")
    with pytest.raises(JobDefinitionError, match="input: Json\\(schema=…\\) needs a schema"):
        declare(input=Json(key="user_id"))


def test_settings_parse_their_text_by_the_type_of_their_default() -> None:
    assert Setting("n", 3).parse(" 7 ") == 7
    assert Setting("x", 0.5).parse("2") == 2.0
    assert Setting("on", False).parse("yes") is True
    assert Setting("name", "a").parse(" b ") == " b "
    with pytest.raises(ValueError, match=r"expected an integer, got '1\.5'"):
        Setting("n", 3).parse("1.5")
    with pytest.raises(ValueError, match="expected true or false"):
        Setting("on", False).parse("maybe")
