"""The card-transaction generator: per-account sequence numbers from 0 without gaps, home
countries with occasional travel, the configured low-priority share, and bad settings refused
before anything is produced."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from schemas import CardTransaction, codec_for
from streamctl.cards import COUNTRIES, CardEvents, CardLedger
from streamctl.clicks import ClickLedger
from streamctl.loadgen import LoadSpec, event_maker, new_ledger
from streamctl.profiles import RateProfile


def test_each_account_numbers_its_transactions_from_zero() -> None:
    events = CardEvents(accounts=7, run_tag="r1-")
    rng = random.Random(3)
    seqs: dict[str, list[int]] = defaultdict(list)
    txns = [events.make(rng, 1_700_000_000_000 + i) for i in range(2000)]
    for t in txns:
        seqs[t.account_id].append(t.account_seq)
    assert len(seqs) == 7
    assert all(s == list(range(len(s))) for s in seqs.values())
    assert len({t.txn_id for t in txns}) == len(txns)
    home = sum(t.country == COUNTRIES[int(t.account_id[-5:]) % len(COUNTRIES)] for t in txns)
    assert 0.9 < home / len(txns) < 1.0
    low = sum(t.priority == 0 for t in txns) / len(txns)
    assert low == pytest.approx(0.3, abs=0.05)


def test_hot_key_share_concentrates_on_account_zero() -> None:
    events = CardEvents(accounts=100, hot_key_share=0.5)
    rng = random.Random(1)
    share = sum(events.make(rng, 0).account_id == "acct-00000" for _ in range(2000)) / 2000
    assert share == pytest.approx(0.5, abs=0.05)


def test_the_ledger_keeps_the_count_per_account() -> None:
    ledger = CardLedger()
    events = CardEvents(accounts=3)
    rng = random.Random(0)
    for _ in range(30):
        ledger.record(events.make(rng, 0))
    assert ledger.acked == 30 and sum(ledger.counts.values()) == 30


def test_the_load_spec_picks_the_generator_and_ledger_by_event_type() -> None:
    spec = LoadSpec("k:9092", "cards", RateProfile("constant", 1), 1, event_type="card",
                    accounts=2)
    key, value, record = event_maker(spec, random.Random(0))(0, 0)
    assert key == record.account_id and isinstance(new_ledger(spec), CardLedger)
    assert codec_for(CardTransaction).decode(value) == record
    clicks = LoadSpec("k:9092", "clicks", RateProfile("constant", 1), 1, event_type="click",
                      users=3)
    key, value, click = event_maker(clicks, random.Random(0))(1_700_000_000_000, 0)
    assert json.loads(value) == click and key == click["user_id"]
    assert isinstance(new_ledger(clicks), ClickLedger)
    with pytest.raises(ValueError, match="unknown event type 'cheque'"):
        LoadSpec("k", "t", RateProfile("constant", 1), 1, event_type="cheque")
    with pytest.raises(ValueError, match="accounts must be >= 1"):
        LoadSpec("k", "t", RateProfile("constant", 1), 1, event_type="card", accounts=0)
    with pytest.raises(ValueError, match="low_priority_share must be in"):
        LoadSpec("k", "t", RateProfile("constant", 1), 1, event_type="card",
                 low_priority_share=1.5)
