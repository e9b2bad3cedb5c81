"""Authenticity of control tuples: HMAC-SHA256 with a key shared by the controller and the jobs.

Owns the canonical bytes a tag covers, signing, constant-time verification, and where a process
finds the key (`STREAMCTL_CONTROL_KEY`, else the file named by `STREAMCTL_CONTROL_KEY_FILE`,
e.g. a Docker secret). The controller signs every tuple it sends (`controller.kafka.clients`); a job
verifies before it looks at anything else (`streaming_jobs.runtime.control.tuples`). Replaying a
captured tuple gains nothing: its epoch is stale once applied.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import secrets
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from pathlib import Path

import fastavro

from schemas.codec import load_schema, previous_schemas
from schemas.records import ControlTuple

KEY_ENV = "STREAMCTL_CONTROL_KEY"
KEY_FILE_ENV = "STREAMCTL_CONTROL_KEY_FILE"
MIN_KEY_BYTES = 16
"""128 bits: below that an HMAC key can be guessed; a generated key has 256."""
TAG_BYTES = hashlib.sha256().digest_size


class ControlKeyError(ValueError):
    """The key in the environment is unusable; the message says which variable and why."""


class Signature(StrEnum):
    """Outcome of `verify`; the values are the job's rejection reasons (Prometheus labels)."""

    VALID = "valid"
    UNSIGNED = "unsigned"
    BAD_SIGNATURE = "bad_signature"


def canonical(tuple_: ControlTuple) -> bytes:
    """What the tag covers: the Avro binary body of the tuple with `auth_tag` null.

    Avro's binary encoding of a record is deterministic (fields in schema order, no map), so
    signer and verifier agree byte for byte. A reader that resolves a newer writer schema
    drops fields it does not know and so cannot verify them: it rejects the tuple, which is
    the safe answer for a field it cannot check. A tuple that sets one knob is encoded with
    the first schema (before `together`), so it signs alike whichever version the controller
    and the job run: they are upgraded one at a time.
    """
    buffer = io.BytesIO()
    schema = _FIRST_SCHEMA if not tuple_.together else load_schema(ControlTuple.AVRO_NAME)
    fastavro.schemaless_writer(buffer, schema, replace(tuple_, auth_tag=None).to_avro())
    return buffer.getvalue()


_FIRST_SCHEMA = fastavro.parse_schema(previous_schemas(ControlTuple.AVRO_NAME)[0])
"""ControlTuple as first shipped: one knob a tuple (`canonical`)."""


def tag(tuple_: ControlTuple, key: bytes) -> bytes:
    return hmac.new(key, canonical(tuple_), hashlib.sha256).digest()


def sign(tuple_: ControlTuple, key: bytes) -> ControlTuple:
    """The same tuple with its authentication tag set."""
    if len(key) < MIN_KEY_BYTES:
        raise ControlKeyError(f"control key has {len(key)} bytes; at least {MIN_KEY_BYTES} needed")
    return replace(tuple_, auth_tag=tag(tuple_, key))


def verify(tuple_: ControlTuple, key: bytes) -> Signature:
    """VALID only when the tag matches (compared in constant time)."""
    if not tuple_.auth_tag:
        return Signature.UNSIGNED
    if len(tuple_.auth_tag) != TAG_BYTES:
        return Signature.BAD_SIGNATURE
    ok = hmac.compare_digest(tuple_.auth_tag, tag(tuple_, key))
    return Signature.VALID if ok else Signature.BAD_SIGNATURE


def key_from_env(env: Mapping[str, str] | None = None) -> bytes | None:
    """The shared key, or None when neither variable is set.

    `STREAMCTL_CONTROL_KEY` is the key itself (UTF-8); `STREAMCTL_CONTROL_KEY_FILE` names a file
    holding it (surrounding whitespace ignored, as secrets files often end with a newline).
    """
    env = os.environ if env is None else env
    if env.get(KEY_ENV):
        return _checked(env[KEY_ENV].encode(), KEY_ENV)
    path = env.get(KEY_FILE_ENV)
    if not path:
        return None
    try:
        raw = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ControlKeyError(f"{KEY_FILE_ENV}={path}: cannot read the key file ({exc})") from exc
    return _checked(raw, f"{KEY_FILE_ENV}={path}")


def _checked(key: bytes, source: str) -> bytes:
    if len(key) < MIN_KEY_BYTES:
        raise ControlKeyError(f"{source}: the control key has {len(key)} bytes; at least "
                        f"{MIN_KEY_BYTES} are needed (e.g. `openssl rand -hex 32`)")
    return key


def ensure_key_file(path: Path) -> Path:
    """Create `path` with a random 256-bit key (mode 0600) unless it exists; returns it.

    The key is written to a private temporary file first and then hard-linked into place, which
    fails if the file exists: two processes starting at once share one complete key.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return path
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink(missing_ok=True)
    return path
