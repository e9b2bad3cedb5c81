"""A quiet confluent-kafka AdminClient and the one metadata probe the stack needs.

Owns how the stack talks to a broker for administration: librdkafka's own console logging is
routed into the `streamctl.stack.rdkafka` Python logger (silent by default) so polling a broker
that is not up yet does not spam stderr. Neighbours: `broker` (readiness) and `topics`.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from streamctl.security.kafka import PLAINTEXT, KafkaSecurity
from streamctl.security.kafka import client_config as kafka_client_config

# Connection-refused lines while a broker boots are expected, not news; set propagate = True
# on this logger to see them when debugging.
RDKAFKA_LOGGER = logging.getLogger("streamctl.stack.rdkafka")
RDKAFKA_LOGGER.addHandler(logging.NullHandler())
RDKAFKA_LOGGER.propagate = False


def client_config(bootstrap_servers: str, security: KafkaSecurity = PLAINTEXT,
                  **extra: Any) -> dict[str, Any]:
    """librdkafka settings shared by every client the stack creates."""
    return kafka_client_config(bootstrap_servers, security, **{
        "logger": RDKAFKA_LOGGER,
        # librdkafka backs off up to 10 s between reconnects; a broker that is still booting
        # would then be noticed seconds late. Local brokers are cheap to retry.
        "reconnect.backoff.max.ms": 500,
        **extra})


def admin_client(bootstrap_servers: str, security: KafkaSecurity = PLAINTEXT) -> AdminClient:
    return AdminClient(client_config(bootstrap_servers, security))


def broker_ids(admin: AdminClient, timeout_s: float) -> list[int] | None:
    """The brokers a metadata request returns, or None if none answered within `timeout_s`."""
    try:
        metadata = admin.list_topics(timeout=max(timeout_s, 0.1))
    except KafkaException:
        return None
    return sorted(metadata.brokers) or None
