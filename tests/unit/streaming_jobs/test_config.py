"""JobConfig: env and option precedence, what the job's declaration supplies (topics, query
id, settings, the checkpoint under the state dir), defaults, validation messages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from streamctl.stack.defaults import default_state_dir as stack_state_dir
from streaming_jobs.api import Job, Json, Objectives, Setting, Topics
from streaming_jobs.config import ConfigError, JobConfig, default_state_dir
from streaming_jobs.loading import load

KEY = {"STREAMCTL_CONTROL_KEY": "0123456789abcdef0123"}
SENSOR = load("sensor-averages")


def from_sources(options: dict[str, Any], env: dict[str, str],
                 job: Job = SENSOR) -> JobConfig:
    return JobConfig.from_sources(job, options, env)


def test_defaults_and_env(tmp_path: Path) -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", "STREAMCTL_INPUT_PARALLELISM": "3",
           "STREAMCTL_SPARK_JARS": "/a.jar, /b.jar", "STREAMCTL_STATE_DIR": str(tmp_path),
           **KEY}
    config = from_sources({}, env)
    assert (config.identity.query_id, config.identity.job) == ("sensor-averages",
                                                              "sensor-averages")
    assert config.topics.input_topic == "sensor-readings"
    assert config.topics.dlq_topic == "sensor-readings.dlq"
    checkpoint = tmp_path / "checkpoints" / "sensor-averages" / "sensor-averages"
    assert config.storage.checkpoint_dir == str(checkpoint)
    assert config.initial.input_parallelism == 3
    assert config.spark.jar_list == ("/a.jar", "/b.jar")
    assert config.identity.instance_id  # hostname-pid
    assert config.security.control_key == b"0123456789abcdef0123"
    assert "0123456789" not in repr(config)
    assert config.storage.desired_state_path == f"{checkpoint}.desired-state.json"
    assert config.initial.udf_version == "v1"  # the job's first function version
    assert config.run.settings_map == {"enrichment_cost_ms": 5.0, "window_s": 10,
                                   "watermark_s": 10, "low_priority_prefixes": ""}


def test_the_initial_state_starts_every_knob_at_its_option_and_the_topics_at_the_job_s(
        ) -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", "STREAMCTL_STATE_PARTITIONS": "6",
           "STREAMCTL_SHED_FRACTION": "0.25", **KEY}
    state = from_sources({"max_offsets_per_trigger": 1234}, env).initial_state()
    assert (state.epoch, state.input_parallelism, state.state_partitions,
            state.max_offsets_per_trigger, state.shed_fraction, state.udf_version,
            state.input_topic, state.output_topic, state.executors, state.active_instance) == (
        0, 2, 6, 1234, 0.25, "v1", "sensor-readings", "sensor-averages", 0, "")


def test_the_checkpoint_does_not_depend_on_the_directory_the_job_starts_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", **KEY}
    here = from_sources({}, env).storage.checkpoint_dir
    monkeypatch.chdir(tmp_path)
    assert from_sources({}, env).storage.checkpoint_dir == here
    assert Path(here).is_absolute()
    assert default_state_dir({}) == stack_state_dir({})  # the stack and the job agree
    assert default_state_dir({"STREAMCTL_STATE_DIR": str(tmp_path)}) == tmp_path


def test_with_a_hot_standby_each_instance_has_its_own_checkpoint_and_shares_the_state_file(
        tmp_path: Path) -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", **KEY}
    options = {"checkpoint_dir": str(tmp_path / "q"), "instance_id": "b", "standby": "hot"}
    storage = from_sources(options, env).storage
    assert (storage.checkpoint_dir, storage.query_dir) == (str(tmp_path / "q.instance-b"),
                                                           str(tmp_path / "q"))
    assert storage.desired_state_path == str(tmp_path / "q.desired-state.json")
    with pytest.raises(ConfigError, match="standby must be one of warm, hot, got 'cold'"):
        from_sources({**options, "standby": "cold"}, env)


def test_job_settings_come_from_set_then_env_then_the_declaration() -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", "STREAMCTL_WINDOW_S": "30", **KEY}
    config = from_sources({"settings": ["enrichment_cost_ms=0.5", "window_s=20"]}, env)
    assert config.run.settings_map["enrichment_cost_ms"] == 0.5
    assert config.run.settings_map["window_s"] == 20  # --set wins over the variable
    assert from_sources({}, env).run.settings_map["window_s"] == 30
    with pytest.raises(ConfigError, match="--set 'windows=3': job 'sensor-averages' has no "
                                          "setting 'windows' \\(its settings: "
                                          "enrichment_cost_ms, window_s"):
        from_sources({"settings": ["windows=3"]}, env)
    with pytest.raises(ConfigError, match="setting 'window_s' of job 'sensor-averages': "
                                          "expected an integer, got 'ten'"):
        from_sources({"settings": ["window_s=ten"]}, env)


def test_a_function_version_the_job_does_not_declare_is_refused() -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", **KEY}
    with pytest.raises(ConfigError, match="udf_version 'v9' of job 'sensor-averages': "
                                          "expected a registered version: v1, v2"):
        from_sources({"udf_version": "v9"}, env)
    plain = Job(name="plain", build=lambda spark, source, context: source,
                input=Json("a string"), topics=Topics("a", "b"),
                settings=(Setting("flag", True),))
    with pytest.raises(ConfigError, match="job 'plain' declares no function versions"):
        from_sources({"udf_version": "v1"}, env, plain)
    assert from_sources({"settings": ["flag=no"]}, env, plain).run.settings_map == {"flag": False}


def test_the_key_comes_only_from_the_environment_and_is_required() -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092"}
    with pytest.raises(ConfigError, match="no control key: set STREAMCTL_CONTROL_KEY or "
                                          "STREAMCTL_CONTROL_KEY_FILE"):
        from_sources({"control_key": "given-as-an-option!"}, env)
    with pytest.raises(ConfigError, match="at least 16"):
        from_sources({}, {**env, "STREAMCTL_CONTROL_KEY": "short"})


def test_objectives_come_from_the_options_over_the_jobs_declaration() -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", "STREAMCTL_DRAIN_WITHIN_S": "300", **KEY}
    assert from_sources({}, {**KEY, "STREAMCTL_BOOTSTRAP_SERVERS": "k:9092"}).objectives == \
        Objectives()
    stating = Job(name="stating", build=lambda spark, rows, context: rows,
                  input=Json("k string"), topics=Topics(input="in", output="out"),
                  objectives=Objectives(max_delay_s=30, drain_within_s=120))
    config = from_sources({"max_delay_s": 10.0}, env, stating)
    assert config.objectives == Objectives(max_delay_s=10, drain_within_s=300)
    assert from_sources({}, {**KEY, "STREAMCTL_BOOTSTRAP_SERVERS": "k:9092"},
                        stating).objectives == Objectives(max_delay_s=30, drain_within_s=120)


def test_options_win_over_env() -> None:
    env = {"STREAMCTL_BOOTSTRAP_SERVERS": "k:9092", "STREAMCTL_QUERY_ID": "from-env", **KEY}
    config = from_sources({"query_id": "from-cli", "input_parallelism": None}, env)
    assert config.identity.query_id == "from-cli"
    assert config.storage.checkpoint_dir.endswith(os.path.join("checkpoints", "sensor-averages",
                                                       "from-cli"))
    assert config.initial.input_parallelism == 2


@pytest.mark.parametrize(("options", "message"), [
    ({}, "bootstrap-servers"),
    ({"bootstrap_servers": "k:1", "task_slots": "abc"}, "--task-slots='abc' is not a valid int"),
    ({"bootstrap_servers": "k:1", "input_parallelism": 20},
     r"input_parallelism=20: expected an integer in \[1, 16\] \(task_slots\)"),
    ({"bootstrap_servers": "k:1", "metrics_port": 70000}, "metrics_port"),
    ({"bootstrap_servers": "k:1", "state_partitions": 0},
     r"state_partitions=0: expected an integer in \[1, 64\]"),
    ({"bootstrap_servers": "k:1", "shed_fraction": 0.6}, r"shed_fraction=0.6: expected a number in "
                                                          r"\[0, 0.5\] \(max_shed_fraction\)"),
    ({"bootstrap_servers": "k:1", "max_shed_fraction": 1.0}, "max_shed_fraction must be in"),
    ({"bootstrap_servers": "k:1", "max_delay_s": 3.0},
     "max_delay_s 3 cannot be met with trigger_interval_s 2"),
    ({"bootstrap_servers": "k:1", "drain_within_s": -5.0}, "drain_within_s must be a number >= 0"),
    ({"bootstrap_servers": "k:1", "max_offsets_per_trigger": 200_000},
     r"max_offsets_per_trigger=200000: expected an integer in \[1, 100000\] "
     r"\(max_offsets_per_trigger_limit\)"),
])
def test_bad_options_are_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_sources(options, KEY)


def test_local_mode_is_the_default_and_a_standalone_master_is_a_cluster() -> None:
    local = from_sources({"bootstrap_servers": "k:1"}, KEY)
    assert (local.spark.local, local.spark.master, local.max_task_slots) == (True, "local[16]", 16)
    cluster = from_sources(
        {"bootstrap_servers": "k:1", "spark_master": "spark://m1:7077,m2:7077",
         "executor_cores": "2", "max_executors": "3", "input_parallelism": "6"}, KEY)
    assert (cluster.spark.local, cluster.spark.master) == (False, "spark://m1:7077,m2:7077")
    assert cluster.max_task_slots == 6  # every executor it may request, times its cores


@pytest.mark.parametrize(("options", "message"), [
    ({"spark_master": "local[4]"}, "for local mode set task_slots instead"),
    ({"spark_master": "k8s://https://api:6443"}, "Kubernetes or YARN need settings"),
    ({"spark_master": "spark://master"}, r"spark://host:port\[,host:port\]"),
    ({"executors": 2}, "executors=2: executors can only be changed on a cluster manager"),
    ({"spark_master": "spark://m:7077", "executors": 9, "max_executors": 8},
     r"executors=9: expected an integer in \[1, 8\] \(max_executors\)"),
    ({"spark_master": "spark://m:7077", "executor_memory_mb": 256},
     r">= 450 \(Spark's minimum\)"),
    ({"spark_master": "spark://m:7077", "executor_cores": 0}, "executor_cores must be > 0"),
    ({"spark_master": "spark://m:7077", "max_executors": 2, "input_parallelism": 3},
     r"input_parallelism=3: expected an integer in \[1, 2\] \(max_executors x "
     r"executor_cores on a cluster\)"),
])
def test_bad_cluster_settings_are_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_sources({"bootstrap_servers": "k:1", **options}, KEY)


def test_on_a_cluster_the_session_gets_executor_settings_and_no_dynamic_allocation() -> None:
    from streaming_jobs.runtime.query.session import cluster_settings

    local = from_sources({"bootstrap_servers": "k:1"}, KEY)
    assert cluster_settings(local.spark, local.bounds.max_executors) == {}
    cluster = from_sources(
        {"bootstrap_servers": "k:1", "spark_master": "spark://m:7077", "executor_cores": "2",
         "executor_memory_mb": "512", "max_executors": "3", "spark_driver_host": "job"}, KEY)
    assert cluster_settings(cluster.spark, cluster.bounds.max_executors) == {
        "spark.executor.cores": "2", "spark.executor.memory": "512m",
        "spark.dynamicAllocation.enabled": "false", "spark.cores.max": "6",
        "spark.driver.host": "job"}


@pytest.mark.parametrize(("checkpoint_dir", "renames_by_file_system"), [
    ("/var/lib/streamctl/checkpoints/q", True),
    ("file:///var/lib/streamctl/checkpoints/q", True),
    ("relative/checkpoint", True),
    ("hdfs://namenode:8020/checkpoints/q", False),
    ("s3a://bucket/checkpoints/q", False),
])
def test_a_local_checkpoint_is_written_with_the_file_systems_own_rename(
        checkpoint_dir: str, renames_by_file_system: bool) -> None:
    from streaming_jobs.runtime.query.session import FILE_SYSTEM_CHECKPOINTS, checkpoint_settings

    settings = checkpoint_settings(checkpoint_dir)
    assert (settings.get("spark.sql.streaming.checkpointFileManagerClass")
            == FILE_SYSTEM_CHECKPOINTS) is renames_by_file_system
    assert len(settings) == int(renames_by_file_system)
