"""The Kafka client-security setting: parsing from the environment, its error messages, and the
librdkafka and Spark renderings of one setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamctl.security import kafka
from streamctl.security.kafka import KafkaSecurity, KafkaSecurityError, from_env


@pytest.fixture
def ca(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return str(path)


def sasl_ssl_env(ca: str, **extra: str) -> dict[str, str]:
    return {"STREAMCTL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "STREAMCTL_KAFKA_SASL_USERNAME": "streamctl-job",
            "STREAMCTL_KAFKA_SASL_PASSWORD": "s3cret", "STREAMCTL_KAFKA_SSL_CA_FILE": ca,
            **extra}


def test_nothing_set_is_plaintext_with_no_security_properties() -> None:
    assert from_env({}) == kafka.PLAINTEXT
    assert kafka.PLAINTEXT.librdkafka() == {"security.protocol": "plaintext"}
    assert kafka.PLAINTEXT.spark_options() == {"kafka.security.protocol": "PLAINTEXT"}


def test_sasl_ssl_renders_the_same_setting_for_librdkafka_and_spark(ca: str) -> None:
    s = from_env(sasl_ssl_env(ca, STREAMCTL_KAFKA_SASL_MECHANISM="scram-sha-256"))
    assert s.librdkafka() == {
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "streamctl-job", "sasl.password": "s3cret", "ssl.ca.location": ca}
    assert s.spark_options() == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                  'required username="streamctl-job" password="s3cret";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": ca}


def test_the_password_comes_from_a_file_and_never_shows(ca: str, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-a-secret\n")
    env = sasl_ssl_env(ca, STREAMCTL_KAFKA_SASL_PASSWORD_FILE=str(secret))
    del env["STREAMCTL_KAFKA_SASL_PASSWORD"]
    s = from_env(env)
    assert s.password == "from-a-secret"
    assert "from-a-secret" not in repr(s) and "from-a-secret" not in s.describe()
    assert s.describe() == "SASL_SSL SCRAM-SHA-512 as streamctl-job"


def test_jaas_quotes_and_backslashes_are_escaped() -> None:
    s = KafkaSecurity("SASL_PLAINTEXT", "PLAIN", 'a"b', "c\\d")
    assert s.jaas_config() == ('org.apache.kafka.common.security.plain.PlainLoginModule '
                               'required username="a\\"b" password="c\\\\d";')


@pytest.mark.parametrize(("change", "message"), [
    ({"STREAMCTL_KAFKA_SECURITY_PROTOCOL": "TLS"},
     "STREAMCTL_KAFKA_SECURITY_PROTOCOL='TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
     "SASL_SSL"),
    ({"STREAMCTL_KAFKA_SASL_MECHANISM": "GSSAPI"},
     "STREAMCTL_KAFKA_SASL_MECHANISM='GSSAPI' is not one of SCRAM-SHA-512"),
    ({"STREAMCTL_KAFKA_SASL_USERNAME": ""},
     "STREAMCTL_KAFKA_SASL_USERNAME is required with STREAMCTL_KAFKA_SECURITY_PROTOCOL=SASL_SSL"),
    ({"STREAMCTL_KAFKA_SASL_PASSWORD": ""},
     r"STREAMCTL_KAFKA_SASL_PASSWORD \(or STREAMCTL_KAFKA_SASL_PASSWORD_FILE\) is required with "
     r"STREAMCTL_KAFKA_SECURITY_PROTOCOL=SASL_SSL \(user streamctl-job\)"),
    ({"STREAMCTL_KAFKA_SECURITY_PROTOCOL": "SSL"},
     "STREAMCTL_KAFKA_SASL_USERNAME and .* only apply to SASL_SSL or SASL_PLAINTEXT, but "
     "STREAMCTL_KAFKA_SECURITY_PROTOCOL=SSL: the credentials would be ignored"),
    ({"STREAMCTL_KAFKA_SSL_CA_FILE": "/nonexistent/ca.pem"},
     "STREAMCTL_KAFKA_SSL_CA_FILE=/nonexistent/ca.pem: no such file"),
    ({"STREAMCTL_KAFKA_SASL_PASSWORD_FILE": "/nonexistent/password"},
     "set STREAMCTL_KAFKA_SASL_PASSWORD or STREAMCTL_KAFKA_SASL_PASSWORD_FILE, not both"),
])
def test_bad_settings_name_the_variable_to_fix(ca: str, change: dict[str, str],
                                               message: str) -> None:
    with pytest.raises(KafkaSecurityError, match=message):
        from_env({**sasl_ssl_env(ca), **change})


def test_a_ca_file_without_tls_and_an_unreadable_password_file_are_refused(ca: str) -> None:
    with pytest.raises(KafkaSecurityError, match=r"STREAMCTL_KAFKA_SSL_CA_FILE only applies to "
                                                 r"SSL or SASL_SSL, but .*=SASL_PLAINTEXT"):
        from_env(sasl_ssl_env(ca, STREAMCTL_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT"))
    env = sasl_ssl_env(ca, STREAMCTL_KAFKA_SASL_PASSWORD_FILE="/nonexistent/password")
    del env["STREAMCTL_KAFKA_SASL_PASSWORD"]
    with pytest.raises(KafkaSecurityError, match="STREAMCTL_KAFKA_SASL_PASSWORD_FILE="
                                                 "/nonexistent/password: cannot read"):
        from_env(env)


def test_constructed_directly_the_messages_name_the_fields() -> None:
    with pytest.raises(KafkaSecurityError, match=r"^username is required with protocol=SASL_SSL"):
        KafkaSecurity("SASL_SSL")
