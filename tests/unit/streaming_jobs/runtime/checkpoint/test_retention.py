"""Input deleted before the query read it (pure): which partitions, how many records, and the
one sentence the log, the halted state and the operator read."""

from __future__ import annotations

from streaming_jobs.runtime.checkpoint.retention import Deleted, deleted, sentence


def test_only_partitions_whose_log_starts_past_where_the_checkpoint_resumes_lost_records(
        ) -> None:
    found = deleted("in", {0: 100, 1: 500, 2: 70},
                    {0: (1_000, 5_000), 1: (400, 900), 3: (50, 60)})
    assert found == (Deleted("in", 0, 100, 1_000, 5_000),)
    assert found[0].records == 900
    assert deleted("in", {}, {0: (1_000, 5_000)}) == ()


def test_the_sentence_names_the_records_the_partitions_and_the_way_on() -> None:
    found = [Deleted("in", 0, 100, 1_000, 5_000), Deleted("in", 1, 7, 9, 20)]
    stop = sentence("q", found, "stop")
    assert stop.startswith("query q: 902 records of its input were deleted (retention, or "
                           "delete-records) before it read them (in/0: offsets 100-999, in/1: "
                           "offsets 7-8); halted, reading nothing, until restarted with "
                           "--on-data-loss skip")
    assert sentence("q", found, "skip").endswith(
        "going on from the earliest records still there (--on-data-loss skip)")
