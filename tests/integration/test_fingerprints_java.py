"""Producers in other languages write what streamctl reads: the fingerprint and canonical form
of every shipped schema agree with Apache Avro's Java library (the specification's reference,
resolved from Maven Central), and a record a Java producer encodes with Avro's own
single-object encoder decodes in streamctl's codec, byte for byte the same as its own."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from schemas import SensorReading, codec_for, single_object
from streamctl.stack.defaults import default_state_dir
from streamctl.stack.maven import resolve_classpath

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

JAVA = Path(__file__).parents[1] / "data" / "java"
SHIPPED = sorted(p.name for p in resources.files("schemas").joinpath("avro").iterdir()
                 if p.name.endswith(".avsc"))


@pytest.fixture(scope="module")
def java_avro() -> list[str]:
    """`java` with Avro's jars on the class path, for single-file source launch."""
    java = shutil.which("java")
    assert java, "Java 17+ is required (the broker and Spark need it too)"
    classpath = resolve_classpath(JAVA / "avro.xml", default_state_dir() / "maven")
    return [java, "-cp", ":".join(str(p) for p in classpath), str(JAVA / "FingerprintOf.java")]


def run(command: list[str], *args: Path) -> list[str]:
    done = subprocess.run([*command, *map(str, args)], capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_schema_has_javas_fingerprint_and_canonical_form(
        java_avro: list[str], name: str) -> None:
    path = Path(str(resources.files("schemas").joinpath("avro", name)))
    schema = json.loads(path.read_text())
    fingerprint, canonical = run(java_avro, path)[:2]
    assert int(fingerprint) == single_object.fingerprint_as_long(schema)
    assert canonical == single_object.canonical_form(schema)


def test_a_record_encoded_in_java_decodes_here_and_matches_ours(java_avro: list[str],
                                                              tmp_path: Path) -> None:
    reading = SensorReading("s-1", 1_700_000_000_000, 21.5, 7)
    datum = tmp_path / "reading.json"
    datum.write_text(json.dumps(reading.to_avro()))
    path = Path(str(resources.files("schemas").joinpath("avro", "sensor_reading.avsc")))
    encoded = bytes.fromhex(run(java_avro, path, datum)[2])
    assert codec_for(SensorReading).decode(encoded) == reading
    assert encoded == codec_for(SensorReading).encode(reading)
