"""The embedded local stack (deployment layer): a real Kafka broker (or a local cluster of
them) and Maven-resolved jars.

Imports nothing from `controller` or `streamctl`, and `streaming_jobs` only lazily, for the
topics a job declares (`stack topics --job`). Entry points: `broker.LocalBroker`,
`cluster.LocalCluster`,
`topics.ensure_topics`, `connector.spark_kafka_jars`, `kafka_tools` (Kafka's own command-line
tools), and `cli.add_stack_commands` for the `streamctl stack` command group.
"""
