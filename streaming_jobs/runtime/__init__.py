"""The elastic runtime around a streaming query.

`job.ElasticJob` assembles: `session` (SparkSession), `lifecycle` (the query and its runs),
`gate` + `sink` (foreachBatch quiesce gate and Kafka writer), `listener` + `metrics` (progress →
TaskMetrics), `control` (tuples → acks), `reconfigure` (quiesce → restart → pause),
`kafka` (confluent-kafka adapters), `prometheus`.
"""
