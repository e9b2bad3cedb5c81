"""Exactly-once output: the quiesce gate every batch passes (`gate`), the foreachBatch sinks
(`foreach_batch`), the commit markers and the replay decision (`transactional`, pure), and the
transactional producer (`transactional_kafka`, a Kafka adapter). docs/exactly-once.md.
"""
