"""`streamctl schema`: Avro fingerprints for producers written in any language.

Owns the commands that tell a producer what to put in front of an Avro body so a job (or the
controller) reads it: `schema fingerprint FILE.avsc…` prints each schema's parsing canonical
form, its CRC-64-AVRO fingerprint as the 8 bytes on the wire and as Java's long, and the
10-byte header of a single-object encoded record; `schema list` prints the table of the
schemas streamctl ships (docs/schemas.md holds its output; a test keeps the two equal).
Neighbours: `schemas.single_object` (the computation), `cli` (registers it).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from schemas import single_object


def add_schema_commands(groups: Any) -> None:
    schema = groups.add_parser("schema", help="Avro schema fingerprints for producers in any "
                                              "language")
    commands = schema.add_subparsers(dest="schema_command", required=True, metavar="COMMAND")
    fp = commands.add_parser("fingerprint", help="canonical form and fingerprint of .avsc files",
                             description="Print what a producer puts before the Avro body of "
                                         "a single-object encoded record of each schema.")
    fp.add_argument("files", nargs="+", type=Path, metavar="FILE.avsc")
    fp.set_defaults(handler=fingerprint_command)
    listing = commands.add_parser("list", help="the schemas streamctl ships, with fingerprints")
    listing.set_defaults(handler=list_command)


def describe(schema: Any) -> str:
    fingerprint = single_object.fingerprint(schema)
    return "\n".join([
        f"canonical form: {single_object.canonical_form(schema)}",
        f"fingerprint:    {fingerprint.hex()} (8 bytes on the wire, CRC-64-AVRO little-endian; "
        f"Java's SchemaNormalization.parsingFingerprint64: "
        f"{single_object.fingerprint_as_long(schema)})",
        f"header:         {single_object.frame(fingerprint, b'').hex()} (then the Avro body)"])


def fingerprint_command(args: argparse.Namespace) -> int:
    for path in args.files:
        try:
            schema = json.loads(path.read_text())
            text = describe(schema)
        except (OSError, ValueError) as exc:
            print(f"schema fingerprint: {path}: {exc}", file=sys.stderr)
            return 2
        print(f"{path}\n{text}\n")
    return 0


def shipped_table() -> str:
    """Markdown rows of every schema under schemas/avro: full name, file, fingerprint."""
    rows = ["| record | file | fingerprint (wire bytes, hex) | Java `parsingFingerprint64` |",
            "|---|---|---|---|"]
    for entry in sorted(resources.files("schemas").joinpath("avro").iterdir(),
                        key=lambda e: e.name):
        if not entry.name.endswith(".avsc"):
            continue
        schema = json.loads(entry.read_text())
        name = f"{schema['namespace']}.{schema['name']}"
        rows.append(f"| `{name}` | `schemas/avro/{entry.name}` | "
                    f"`{single_object.fingerprint(schema).hex()}` | "
                    f"`{single_object.fingerprint_as_long(schema)}` |")
    return "\n".join(rows)


def list_command(_args: argparse.Namespace) -> int:
    print(shipped_table())
    return 0
