"""Transport security shared by every streamctl process: a leaf package.

`streamctl.security.kafka` is the Kafka client-security setting (protocol, SASL, the CA to trust)
read once from the environment and turned into librdkafka properties and Spark `kafka.*` options;
`streamctl.security.metrics_http` serves a WSGI app (the Prometheus exposition) optionally behind
TLS and HTTP basic auth. Both the controller and the jobs need them, and neither may import the
other, so they live here: this package imports nothing of the project (tests/unit/test_layering.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streamctl.security import kafka, metrics_http


class TransportSecurityError(ValueError):
    """A security variable is wrong; the message says which setting and why."""


@dataclass(frozen=True)
class TransportSecurity:
    """How a process talks to Kafka and serves its metrics, from its environment."""

    kafka: kafka.KafkaSecurity
    metrics_endpoint: metrics_http.EndpointSecurity

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TransportSecurity:
        client = kafka.from_env_raising(TransportSecurityError, env)
        try:
            endpoint = metrics_http.from_env(env)
        except metrics_http.EndpointSecurityError as exc:
            raise TransportSecurityError(f"metrics endpoint: {exc}") from None
        return cls(client, endpoint)
