"""What the tests share, one helper each: waiting for a condition (`waiting`), producing to
and reading from Kafka, `read_committed` included (`kafka`), control tuples and their acks
(`control`, through the production `job send` path), the local Spark standalone cluster
(`spark_cluster`) and Prometheus with promtool (`prometheus`); and how `./dev test` runs two
tests at a time (`parallel`, a pytest plugin)."""
