"""Spark jobs and the elastic runtime around them.

`sensor_averages` is the bundled job's transformation; `runtime` runs it as an elastic query
(lifecycle, metrics, control, reconfiguration, Kafka adapters, Prometheus); `cli` is `job run`.
The only package of the project that imports pyspark; it imports nothing of the project but
`schemas`.
"""
