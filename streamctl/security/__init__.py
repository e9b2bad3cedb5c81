"""Transport security shared by every streamctl process: a leaf package.

`streamctl.security.kafka` is the Kafka client-security setting (protocol, SASL, the CA to trust)
read once from the environment and turned into librdkafka properties and Spark `kafka.*` options;
`streamctl.security.metrics_http` serves a WSGI app (the Prometheus exposition) optionally behind
TLS and HTTP basic auth. Both the controller and the jobs need them, and neither may import the
other, so they live here: this package imports nothing of the project (tests/unit/test_layering.py).
"""
