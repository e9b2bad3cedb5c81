"""Dead letters and record sizes (pure): what a topic takes, how a record that does not fit
is still a dead letter, and the start-up check of the job's record limit."""

from __future__ import annotations

import pytest

from streaming_jobs.runtime.sink.dead_letter import (
    RECORD_OVERHEAD_BYTES,
    LetterSpec,
    Rejected,
    TopicLimits,
    framed,
    limit_problems,
    outgoing,
    record_bytes,
    screen,
)

ORIGIN = [("source_topic", "in"), ("error", "not JSON")]


def test_a_dead_letter_that_fits_keeps_its_payload_and_says_its_size() -> None:
    letter = framed(b"k", b"x" * 100, list(ORIGIN), 10_000)
    assert letter.value == b"x" * 100 and letter.key == b"k"
    assert dict(letter.headers) == {**dict(ORIGIN), "size": "100"}


@pytest.mark.parametrize("size", [5_000, 2_000_000])
def test_a_dead_letter_larger_than_the_limit_keeps_what_fits_and_says_how_much(
        size: int) -> None:
    letter = framed(None, b"x" * size, list(ORIGIN), 4096)
    assert record_bytes(letter.key, letter.value, letter.headers) <= 4096
    kept = len(letter.value or b"")
    assert 3000 < kept < 4096
    headers = dict(letter.headers)
    assert headers["size"] == str(size)
    assert headers["truncated"] == f"kept the first {kept} of {size} bytes"


def test_a_key_that_alone_leaves_no_room_is_dropped_and_named() -> None:
    letter = framed(b"k" * 5000, b"v" * 10, [], 4096)
    assert letter.key is None and dict(letter.headers)["key_dropped"] == "5000 bytes"
    assert record_bytes(letter.key, letter.value, letter.headers) <= 4096


def test_rows_over_the_smaller_limit_or_keyless_on_a_compacted_topic_are_rejected() -> None:
    limit = 1000 + RECORD_OVERHEAD_BYTES
    keys = [b"a", b"b", None, b"d"]
    values = [b"x" * 10, b"x" * 1001, b"x" * 10, b"x" * 999]
    rejected = screen(keys, values, "out", TopicLimits(limit, compacted=True), 1_000_000)
    assert [r.index for r in rejected] == [1, 2]
    assert rejected[0].reason == (f"record too large for out: {1002 + RECORD_OVERHEAD_BYTES} "
                                  f"bytes with overhead, over the limit {limit} (out's "
                                  f"max.message.bytes {limit})")
    assert rejected[1].reason == ("no key: out is compacted (cleanup.policy=compact), which "
                                  "needs one")
    by_job = screen([b"a"], [b"x" * 2000], "out", TopicLimits(), 1500)
    assert "the job's max_record_bytes 1500" in by_job[0].reason


def test_a_batch_goes_out_as_its_rows_then_the_dead_letters_of_the_rejected_ones() -> None:
    letters = LetterSpec("dlq", [("query_id", "q")], 4096, bare=frozenset({2}))
    records = outgoing("out", [b"a", b"b", b"c"], [b"1", b"2" * 9000, b"3"],
                       [Rejected(1, "too large"), Rejected(2, "refused")], letters)
    assert [(r.topic, r.row, r.letter) for r in records] == [
        ("out", 0, False), ("dlq", 1, True), ("dlq", 2, True)]
    big, bare = dict(records[1].headers), dict(records[2].headers)
    assert big["error"] == "too large" and big["output_topic"] == "out" and "truncated" in big
    assert records[2].value is None and bare["payload"].startswith("left out")


def test_a_record_limit_over_a_topics_names_both_numbers_and_the_way_out() -> None:
    problems = limit_problems(2_000_000, [("output topic", "scores", TopicLimits(1_048_588)),
                                          ("dead-letter topic", "dlq", TopicLimits(5_000_000))])
    assert problems == [
        "max_record_bytes 2000000 (--max-record-bytes, STREAMCTL_MAX_RECORD_BYTES) is over the "
        "output topic scores's max.message.bytes 1048588: lower it, or raise the topic's limit "
        "(streamctl stack kafka configs --entity-type topics --entity-name scores --alter "
        "--add-config max.message.bytes=2000000)"]
