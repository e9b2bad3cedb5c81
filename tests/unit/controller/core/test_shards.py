"""Which metrics partitions carry the queries of the shards an instance leads."""

from __future__ import annotations

from controller.core.shards import read_partitions


def test_partitions_a_multiple_of_the_shards_carry_each_shard_in_every_shards_th_one() -> None:
    assert read_partitions({1}, 2, 4) == {1, 3}
    assert read_partitions({0, 2}, 4, 8) == {0, 2, 4, 6}
    assert read_partitions(set(), 4, 4) == frozenset()


def test_one_shard_or_partitions_that_do_not_divide_into_the_shards_are_read_whole() -> None:
    assert read_partitions({0}, 1, 4) is None
    assert read_partitions({0}, 4, 6) is None
    assert read_partitions({0}, 4, 1) is None
