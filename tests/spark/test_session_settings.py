"""The classes and modules a job's session names by string exist in the pinned Spark: a
renamed one would otherwise fail every job's first query, not a test that says why."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from streaming_jobs.runtime.checkpoint.state_repartition import ROCKSDB_PROVIDER
from streaming_jobs.runtime.query.session import FILE_SYSTEM_CHECKPOINTS, PYTHON_DAEMON

pytestmark = [pytest.mark.spark]


@pytest.mark.parametrize("name", [FILE_SYSTEM_CHECKPOINTS, ROCKSDB_PROVIDER])
def test_each_class_the_session_names_is_in_sparks_jars(spark: Any, name: str) -> None:
    assert spark._jvm.java.lang.Class.forName(name).getName() == name


def test_the_python_daemon_module_imports_in_a_fresh_interpreter() -> None:
    """Spark starts it as `python -m` in a fresh interpreter: it must import there."""
    done = subprocess.run([sys.executable, "-c", f"import {PYTHON_DAEMON}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
