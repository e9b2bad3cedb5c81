"""The controller's Kafka adapters, the only modules here that import confluent_kafka:
`clients` (the ports on Kafka: metrics and ack consumers, the producer of tuples and
decisions), `history` (reading its own history at start-up), `traces` (a time range of the
metrics topic for record and replay).
"""
