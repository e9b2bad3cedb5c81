"""Avro single-object encoding on plain dicts: fingerprints, framing, and decode errors in words.

Owns the framing every Avro record of streamctl carries (Avro specification, "Single-object
encoding"): the marker `C3 01`, the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's *parsing canonical form*, then the Avro binary body. `codec` builds its typed records
on it; the jobs' Avro formats (`streaming_jobs.formats`) use it for users' own schemas.

Why a canonical form of our own making matters: a producer in another language must compute
the same 8 bytes. The specification's canonical form keeps only `type`, `name`, `fields`,
`symbols`, `items`, `values` and `size`, and writes a primitive in its simple form, so
`{"type": "long", "logicalType": "timestamp-millis"}` becomes `"long"`. Java's
`SchemaNormalization.parsingFingerprint64` and fastavro follow it; the Apache `avro` Python
library's `Schema.fingerprint()` keeps `{"type":"long"}` for a logical type and so disagrees
for every schema with a logical type (docs/schemas.md gives a recipe that gets it right).

Decoding raises only `DecodeError`, whose reason is a sentence a person can act on (what was
wrong with the bytes), never a library's exception repr.
"""

from __future__ import annotations

import copy
import io
import json
import struct
from collections.abc import Mapping
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from schemas.errors import DecodeError

MAGIC = b"\xc3\x01"
HEADER_LEN = len(MAGIC) + 8


def parse(schema: Any) -> Any:
    """A schema (JSON text, its dict, or a parsed one) parsed by fastavro; `ValueError` with
    the parser's complaint when it is not a valid Avro schema."""
    raw = json.loads(schema) if isinstance(schema, str) else copy.deepcopy(dict(schema))
    try:
        return fastavro.parse_schema(raw)
    except Exception as exc:  # fastavro raises several types for a bad schema
        raise ValueError(f"not a valid Avro schema: {exc}") from exc


def canonical_form(schema: Any) -> str:
    """The specification's parsing canonical form of `schema`, as a string."""
    return str(to_parsing_canonical_form(parse(schema)))


def fingerprint(schema: Any) -> bytes:
    """The 8 bytes a single-object encoded record carries after `C3 01` (CRC-64-AVRO of the
    canonical form, little-endian, as Java's `SchemaNormalization` writes it)."""
    # fastavro's hex string already holds the bytes in little-endian order.
    return bytes.fromhex(_fastavro_fingerprint(canonical_form(schema), "CRC-64-AVRO"))


def fingerprint_as_long(schema: Any) -> int:
    """The fingerprint as the signed 64-bit number Java's `parsingFingerprint64` returns."""
    return int(struct.unpack("<q", fingerprint(schema))[0])


def without_logical_types(schema: Any) -> Any:
    """`schema` with every `logicalType` removed, parsed: records decode to the annotated
    Avro types (a `timestamp-millis` is the long of epoch milliseconds, as the in-process
    types keep it) and encode from them. The binary encoding is the same either way."""
    def strip(node: Any) -> Any:
        if isinstance(node, list):
            return [strip(n) for n in node]
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items()
                    if k != "logicalType" and not k.startswith("__")}
        return node
    return fastavro.parse_schema(strip(copy.deepcopy(schema)))


def frame(fingerprint_bytes: bytes, body: bytes) -> bytes:
    return MAGIC + fingerprint_bytes + body


def write_body(schema: Any, datum: Mapping[str, Any]) -> bytes:
    """The Avro binary body of `datum` under the parsed `schema`."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, dict(datum))
    return buf.getvalue()


def split(payload: bytes | None, expected: str) -> tuple[bytes, bytes]:
    """(fingerprint, body) of a single-object encoded `payload`; `DecodeError` in words when
    it is not one. `expected` names the record the reader wants, for the message."""
    if payload is None:
        raise DecodeError("empty payload (a null value), expected an Avro " + expected)
    if len(payload) < HEADER_LEN or payload[:2] != MAGIC:
        raise DecodeError(f"not Avro single-object encoded: {_what_it_looks_like(payload)}, "
                          f"expected the marker c3 01 and an 8-byte schema fingerprint before "
                          f"the {expected} body")
    return payload[2:HEADER_LEN], payload[HEADER_LEN:]


def read_body(body: bytes, writer: Any, reader: Any, record_name: str) -> dict[str, Any]:
    """Decode one Avro body written with `writer`, resolved to `reader` (both parsed); a
    `DecodeError` in words for anything that is not exactly one such record."""
    stream = io.BytesIO(body)
    try:
        data = fastavro.schemaless_reader(stream, writer, reader)
    except Exception as exc:  # fastavro raises many types on garbage: one error, in words
        raise DecodeError(describe_failure(exc, record_name, len(body))) from exc
    if not isinstance(data, dict):
        raise DecodeError(f"the Avro body is not a {record_name} record")
    if stream.tell() != len(body):
        raise DecodeError(f"{len(body) - stream.tell()} trailing bytes after the {record_name} "
                          f"record (the body has {len(body)} bytes): written with another "
                          "schema, or two records in one message")
    return data


def describe_failure(exc: BaseException, record_name: str, body_len: int) -> str:
    """What a decoder exception means for the bytes it was given, in one sentence."""
    if isinstance(exc, (IndexError, EOFError, struct.error)):
        return (f"truncated: the Avro body ends ({body_len} bytes) before a whole "
                f"{record_name} was read")
    if isinstance(exc, UnicodeDecodeError):
        return f"a string field of the {record_name} body is not valid UTF-8 text"
    if type(exc).__name__ == "SchemaResolutionError":
        return f"the writer's schema cannot be read as {record_name}: {exc}"
    return f"corrupt Avro body for {record_name}: {exc}"


def _what_it_looks_like(payload: bytes) -> str:
    head = payload[:2].hex(" ") or "nothing"
    if not payload:
        return "the payload is empty"
    text = payload.lstrip()[:1]
    if text in (b"{", b"["):
        return f"it starts with {head} and looks like JSON text"
    if payload[:1] == b"\x00" and len(payload) >= 5:
        return (f"it starts with {head} and looks like the Confluent wire format (magic byte "
                "0, a schema registry id)")
    if len(payload) < HEADER_LEN and payload[:2] == MAGIC:
        return f"it has only {len(payload)} bytes, fewer than the 10-byte header"
    return f"it starts with {head}"
