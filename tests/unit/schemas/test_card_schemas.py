"""The fraud job's wire records round-trip through the one codec, and a CardTransaction
written before `channel`/`priority` existed still decodes with their defaults."""

from __future__ import annotations

import io

import fastavro
from hypothesis import given
from hypothesis import strategies as st

from schemas.codec import MAGIC, Codec, codec_for
from schemas.records import CardTransaction, ScoredTransaction

text = st.text(max_size=12)
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
millis = st.integers(min_value=0, max_value=4_102_444_800_000)
doubles = st.floats(allow_nan=False)
transactions = st.builds(CardTransaction, text, text, text, longs, doubles, text, text, millis,
                         text, st.integers(min_value=-(2**31), max_value=2**31 - 1))
scored = st.builds(ScoredTransaction, text, text, longs, millis, doubles, longs, doubles,
                   st.lists(text, max_size=3).map(tuple), st.booleans(), text)


@given(transactions)
def test_card_transaction_round_trips(txn: CardTransaction) -> None:
    codec = codec_for(CardTransaction)
    assert codec.decode(codec.encode(txn)) == txn


@given(scored)
def test_scored_transaction_round_trips(record: ScoredTransaction) -> None:
    codec = codec_for(ScoredTransaction)
    assert codec.decode(codec.encode(record)) == record


def test_an_older_writer_without_channel_and_priority_still_decodes() -> None:
    current = codec_for(CardTransaction).schema
    old = {**current, "fields": [f for f in current["fields"]
                                 if f["name"] not in ("channel", "priority")]}
    writer = Codec(CardTransaction, old)
    reader = Codec(CardTransaction)
    reader.register_writer_schema(old)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, writer.schema, {
        "txn_id": "t1", "account_id": "a1", "card_id": "c1", "account_seq": 3, "amount": 9.5,
        "merchant": "m", "country": "DE", "event_time_ms": 1_700_000_000_000})
    payload = MAGIC + writer.fingerprint + body.getvalue()
    txn = reader.decode(payload)
    assert (txn.channel, txn.priority, txn.account_seq) == ("online", 1, 3)
