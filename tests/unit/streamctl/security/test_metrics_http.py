"""The metrics endpoint's settings and server: HTTPS with basic auth serves the exposition to
an authorised scrape and refuses others; plain HTTP stays the default. Real sockets and TLS on
loopback (certificates from `streamctl.stack.tls`), prometheus_client's own exposition app."""

from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, make_wsgi_app

from streamctl.security import metrics_http
from streamctl.security.metrics_http import EndpointSecurity, EndpointSecurityError, from_env
from streamctl.stack import tls
from streamctl.stack.tcp import find_free_ports

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("certs")
    authority = tls.new_authority()
    server = tls.issue_server(authority, ["127.0.0.1", "localhost"])
    paths = {"ca": root / "ca.pem", "cert": root / "cert.pem", "key": root / "key.pem",
             "password": root / "password"}
    paths["ca"].write_bytes(authority.certificate_pem)
    paths["cert"].write_bytes(server.certificate_pem)
    paths["key"].write_bytes(server.key_pem)
    paths["password"].write_text("scrape-me\n")
    return paths


def _env(certs: dict[str, Path], **extra: str) -> dict[str, str]:
    return {"STREAMCTL_METRICS_TLS_CERT_FILE": str(certs["cert"]),
            "STREAMCTL_METRICS_TLS_KEY_FILE": str(certs["key"]),
            "STREAMCTL_METRICS_BASIC_AUTH_USERNAME": "prometheus",
            "STREAMCTL_METRICS_BASIC_AUTH_PASSWORD_FILE": str(certs["password"]), **extra}


@pytest.fixture
def served(certs: dict[str, Path]) -> Iterator[str]:
    registry = CollectorRegistry()
    Counter("streamctl_test_scrapes", "A sample to find", registry=registry).inc()
    (port,) = find_free_ports(1)
    server = metrics_http.serve(make_wsgi_app(registry), port, from_env(_env(certs)),
                                host="127.0.0.1")
    yield f"https://127.0.0.1:{port}/metrics"
    server.shutdown()


def _get(url: str, ca: Path | None, user: str | None = None,
         password: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("WWW-Authenticate", "")


def test_an_authorised_scrape_over_tls_gets_the_metrics(served: str,
                                                        certs: dict[str, Path]) -> None:
    status, body = _get(served, certs["ca"], "prometheus", "scrape-me")
    assert status == 200 and "streamctl_test_scrapes_total 1.0" in body


@pytest.mark.parametrize(("user", "password"), [(None, None), ("prometheus", "guess"),
                                                ("someone", "scrape-me")])
def test_other_scrapes_are_refused_with_a_challenge(served: str, certs: dict[str, Path],
                                                    user: str | None,
                                                    password: str | None) -> None:
    status, challenge = _get(served, certs["ca"], user, password)
    assert status == 401 and challenge.startswith('Basic realm="streamctl metrics"')


def test_plain_http_and_an_untrusted_certificate_get_nothing(served: str,
                                                             certs: dict[str, Path]) -> None:
    with pytest.raises(OSError):
        _get(served.replace("https", "http"), None, "prometheus", "scrape-me")
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        _get(served, None, "prometheus", "scrape-me")  # the system CAs do not know ours


def test_a_silent_client_does_not_block_other_scrapes(served: str,
                                                      certs: dict[str, Path]) -> None:
    """The TLS handshake runs in the request's thread: a connection that never speaks does
    not hold up the next scrape."""
    import socket

    host, port = served.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port))):
        assert _get(served, certs["ca"], "prometheus", "scrape-me")[0] == 200


def test_nothing_set_serves_plain_http_to_anyone() -> None:
    assert from_env({}) == metrics_http.PLAIN
    registry = CollectorRegistry()
    (port,) = find_free_ports(1)
    server = metrics_http.serve(make_wsgi_app(registry), port, host="127.0.0.1")
    try:
        assert _get(f"http://127.0.0.1:{port}/metrics", None)[0] == 200
    finally:
        server.shutdown()


@pytest.mark.parametrize(("drop", "message"), [
    ("STREAMCTL_METRICS_TLS_KEY_FILE",
     "STREAMCTL_METRICS_TLS_KEY_FILE is required with STREAMCTL_METRICS_TLS_CERT_FILE"),
    ("STREAMCTL_METRICS_BASIC_AUTH_PASSWORD_FILE",
     r"STREAMCTL_METRICS_BASIC_AUTH_PASSWORD \(or STREAMCTL_METRICS_BASIC_AUTH_PASSWORD_FILE\) "
     "is required with STREAMCTL_METRICS_BASIC_AUTH_USERNAME"),
])
def test_half_a_setting_names_the_missing_variable(certs: dict[str, Path], drop: str,
                                                   message: str) -> None:
    env = _env(certs)
    del env[drop]
    with pytest.raises(EndpointSecurityError, match=message):
        from_env(env)


def test_missing_files_and_two_passwords_are_refused(certs: dict[str, Path]) -> None:
    with pytest.raises(EndpointSecurityError,
                       match=r"STREAMCTL_METRICS_TLS_CERT_FILE=/nonexistent\.pem: no such file"):
        from_env(_env(certs, STREAMCTL_METRICS_TLS_CERT_FILE="/nonexistent.pem"))
    with pytest.raises(EndpointSecurityError, match="not both"):
        from_env(_env(certs, STREAMCTL_METRICS_BASIC_AUTH_PASSWORD="x"))
    secured = from_env(_env(certs))
    assert "scrape-me" not in repr(secured)
    assert secured.describe() == "https, basic auth as prometheus"
    assert EndpointSecurity().describe() == "http"
