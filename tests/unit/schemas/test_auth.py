"""Control-tuple authenticity: sign/verify, any altered field rejected, the key's sources."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import stat
from dataclasses import fields, replace
from importlib import resources
from pathlib import Path

import fastavro
import pytest

from schemas import auth
from schemas.codec import codec_for
from schemas.records import ControlTuple, KnobSetting

KEY = b"0123456789abcdef0123456789abcdef"
TUPLE = ControlTuple(control_id="c-1", query_id="q", operator_id="source",
                     parameter="input_parallelism", value="4", epoch=7, issuer="controller",
                     reason="backlog growing", issued_at_ms=1_700_000_000_000)


def test_a_signed_tuple_verifies_and_survives_the_wire() -> None:
    signed = auth.sign(TUPLE, KEY)
    assert signed.auth_tag is not None and len(signed.auth_tag) == 32
    decoded = codec_for(ControlTuple).decode(codec_for(ControlTuple).encode(signed))
    assert auth.verify(decoded, KEY) is auth.Signature.VALID


def test_unsigned_and_wrong_key_are_told_apart() -> None:
    assert auth.verify(TUPLE, KEY) is auth.Signature.UNSIGNED
    assert auth.verify(replace(TUPLE, auth_tag=b""), KEY) is auth.Signature.UNSIGNED
    other = auth.sign(TUPLE, b"another key of sixteen+ bytes")
    assert auth.verify(other, KEY) is auth.Signature.BAD_SIGNATURE
    truncated = replace(auth.sign(TUPLE, KEY), auth_tag=b"\x00" * 5)
    assert auth.verify(truncated, KEY) is auth.Signature.BAD_SIGNATURE


ALTERED = {"control_id": "c-2", "query_id": "q2", "operator_id": "sink",
           "parameter": "shed_fraction", "value": "16", "epoch": 8, "issuer": "mallory",
           "reason": "trust me", "issued_at_ms": 1_700_000_000_001,
           "together": (KnobSetting("max_offsets_per_trigger", "99999"),)}


@pytest.mark.parametrize("name", [f.name for f in fields(ControlTuple) if f.name != "auth_tag"])
def test_altering_any_field_after_signing_is_detected(name: str) -> None:
    tampered = replace(auth.sign(TUPLE, KEY), **{name: ALTERED[name]})
    assert auth.verify(tampered, KEY) is auth.Signature.BAD_SIGNATURE


def test_short_keys_are_refused() -> None:
    with pytest.raises(auth.ControlKeyError, match="at least 16"):
        auth.sign(TUPLE, b"short")
    with pytest.raises(auth.ControlKeyError, match=r"STREAMCTL_CONTROL_KEY: .* 5 bytes"):
        auth.key_from_env({"STREAMCTL_CONTROL_KEY": "short"})


def test_key_sources(tmp_path: Path) -> None:
    assert auth.key_from_env({}) is None
    assert auth.key_from_env({"STREAMCTL_CONTROL_KEY": KEY.decode()}) == KEY
    secret = tmp_path / "secret"
    secret.write_text(KEY.decode() + "\n")
    assert auth.key_from_env({"STREAMCTL_CONTROL_KEY_FILE": str(secret)}) == KEY
    with pytest.raises(auth.ControlKeyError, match="cannot read the key file"):
        auth.key_from_env({"STREAMCTL_CONTROL_KEY_FILE": str(tmp_path / "missing")})


def test_a_generated_key_file_is_private_random_and_kept(tmp_path: Path) -> None:
    path = auth.ensure_key_file(tmp_path / "state" / "control.key")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = auth.key_from_env({"STREAMCTL_CONTROL_KEY_FILE": str(path)})
    assert first is not None and len(first) == 64
    auth.ensure_key_file(path)
    assert auth.key_from_env({"STREAMCTL_CONTROL_KEY_FILE": str(path)}) == first
    other = auth.ensure_key_file(tmp_path / "other.key")
    assert other.read_bytes() != path.read_bytes()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["control.key", "other.key", "state"]


def test_a_one_knob_tuple_signed_before_together_existed_verifies_after_and_back() -> None:
    """Controller and jobs are upgraded one at a time: a tuple signed over the first schema's
    body (no `together`) verifies against today's, and the reverse."""
    body = io.BytesIO()
    first = fastavro.parse_schema(json.loads(
        resources.files("schemas").joinpath("history/control_tuple.1.avsc").read_text()))
    plain = {k: v for k, v in replace(TUPLE, auth_tag=None).to_avro().items() if k != "together"}
    fastavro.schemaless_writer(body, first, plain)
    old_tag = hmac.new(KEY, body.getvalue(), hashlib.sha256).digest()
    assert auth.verify(replace(TUPLE, auth_tag=old_tag), KEY) is auth.Signature.VALID
    assert auth.sign(TUPLE, KEY).auth_tag == old_tag
