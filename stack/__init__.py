"""The embedded local stack (deployment layer): a real Kafka broker and Maven-resolved jars.

Imports nothing from `controller`, `streaming_jobs` or `streamctl`. Entry points:
`broker.LocalBroker`, `topics.ensure_topics`, `connector.spark_kafka_jars`, and
`cli.add_stack_commands` for the `streamctl stack` command group.
"""
