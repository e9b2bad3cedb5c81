"""docs/schemas.md stays true: its fingerprint table is what `streamctl schema list` prints
for the shipped schemas, and its CRC-64-AVRO recipe for producers in other languages computes
the fingerprint streamctl reads."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from schemas import single_object
from streamctl.schema_cli import shipped_table

DOC = (Path(__file__).parents[3] / "docs" / "schemas.md").read_text()


def test_the_documented_table_is_the_generated_one() -> None:
    found = re.search(r"<!-- schema-table:begin[^>]*-->\n(.*?)\n<!-- schema-table:end -->",
                      DOC, re.S)
    assert found, "docs/schemas.md lost its generated table markers"
    assert found.group(1) == shipped_table(), "run `streamctl schema list` into docs/schemas.md"


@pytest.mark.parametrize("name", sorted(p.name for p in resources.files("schemas")
                                        .joinpath("avro").iterdir()))
def test_the_documented_crc_recipe_gives_each_schemas_fingerprint(name: str) -> None:
    recipe = next(block for block in re.findall(r"```python\n(.*?)```", DOC, re.S)
                  if "def crc64_avro" in block)
    scope: dict[str, object] = {}
    exec(recipe, scope)  # the documented code, as a producer would copy it
    schema = resources.files("schemas").joinpath("avro", name).read_text()
    canonical = single_object.canonical_form(schema).encode()
    crc = scope["crc64_avro"](canonical)  # type: ignore[operator]
    assert crc.to_bytes(8, "little") == single_object.fingerprint(schema)
