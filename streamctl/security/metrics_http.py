"""The metrics endpoint's transport: plain HTTP, or HTTPS, optionally behind HTTP basic auth.

Owns the `STREAMCTL_METRICS_*` variables (read once at start-up, validated with messages naming
them) and the server that serves a WSGI app with them: the job and the controller hand it
prometheus_client's exposition app (`make_wsgi_app`), so this module needs no client library.
TLS handshakes run in the request's thread, not the accepting one, so a client that connects
and says nothing delays only itself (for at most `REQUEST_TIMEOUT_S`). Imports nothing of the
project (see the package docstring).
"""

from __future__ import annotations

import base64
import errno
import hmac
import logging
import os
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from streamctl.security.env import Variables

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

ENV_NAMES = {
    "tls_cert_file": "STREAMCTL_METRICS_TLS_CERT_FILE",
    "tls_key_file": "STREAMCTL_METRICS_TLS_KEY_FILE",
    "basic_auth_username": "STREAMCTL_METRICS_BASIC_AUTH_USERNAME",
    "basic_auth_password": "STREAMCTL_METRICS_BASIC_AUTH_PASSWORD",
}
PASSWORD_FILE_ENV = "STREAMCTL_METRICS_BASIC_AUTH_PASSWORD_FILE"
PASSWORD_FILE_MEANING = ("File holding the metrics endpoint's basic-auth password (a Docker "
                         "secret); the alternative to STREAMCTL_METRICS_BASIC_AUTH_PASSWORD.")
_VARIABLES = Variables(ENV_NAMES, "basic_auth_password", PASSWORD_FILE_ENV)

REQUEST_TIMEOUT_S = 10.0
"""A scrape that has not sent its request (or finished its TLS handshake) by then is dropped:
Prometheus' own scrape timeout is 10 s by default."""

REALM = "streamctl metrics"


class PortInUse(OSError):
    """The endpoint's port is held by another process (another job or controller here)."""


class EndpointSecurityError(ValueError):
    """The metrics endpoint's settings are unusable; the message names what to set or fix."""


@dataclass(frozen=True)
class EndpointSecurity:
    """TLS and basic auth of a Prometheus endpoint; the default serves plain HTTP to anyone."""

    tls_cert_file: str = ""
    """PEM certificate (chain) of the metrics endpoint; with the key file it serves HTTPS only."""

    tls_key_file: str = ""
    """PEM private key (unencrypted) of the metrics endpoint's certificate."""

    basic_auth_username: str = ""
    """Username a scrape must present (HTTP basic auth); unset serves anyone who can connect."""

    basic_auth_password: str = field(default="", repr=False)
    """Basic-auth password; prefer STREAMCTL_METRICS_BASIC_AUTH_PASSWORD_FILE (a Docker secret)."""

    def __post_init__(self) -> None:
        problem = _problem({f.name: getattr(self, f.name) for f in fields(self)}, str)
        if problem:
            raise EndpointSecurityError(problem)

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert_file else "http"

    def describe(self) -> str:
        """One line for start-up logs: never the password."""
        auth = f", basic auth as {self.basic_auth_username}" if self.basic_auth_username else ""
        return f"{self.scheme}{auth}"


def from_env(env: Mapping[str, str] | None = None) -> EndpointSecurity:
    """The endpoint's setting in the environment; nothing set means plain HTTP."""
    env = os.environ if env is None else env
    values = _VARIABLES.read(env, EndpointSecurityError)
    problem = _problem({f.name: values.get(f.name, "")
                        for f in fields(EndpointSecurity)}, _VARIABLES.name)
    if problem:
        raise EndpointSecurityError(problem)
    return EndpointSecurity(**values)


def _problem(v: Mapping[str, str], name: Callable[[str], str]) -> str | None:
    """The first thing wrong with the field values `v`, worded with `name(field)`."""
    for one, other in (("tls_cert_file", "tls_key_file"),
                       ("basic_auth_username", "basic_auth_password")):
        if bool(v[one]) != bool(v[other]):
            given, missing = (one, other) if v[one] else (other, one)
            return f"{name(missing)} is required with {name(given)}"
    for file in ("tls_cert_file", "tls_key_file"):
        if v[file] and not Path(v[file]).is_file():
            return f"{name(file)}={v[file]}: no such file"
    return None


PLAIN = EndpointSecurity()
"""Plain HTTP, no authentication: the local stack's and the default compose file's."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """One thread per scrape; `shutdown()` stops serving (call it from another thread)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that fails the TLS handshake (plain HTTP, an untrusted certificate) or
        hangs up is the client's problem: one debug line, not a traceback on stderr."""
        log.debug("metrics request from %s failed", client_address, exc_info=True)


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """Every scrape would log a line to stderr; the scrapes are Prometheus' to count."""


def serve(app: WsgiApp, port: int, security: EndpointSecurity = PLAIN,
          host: str = "127.0.0.1", *, any_port_if_taken: bool = False) -> MetricsServer:
    """Serve `app` on `host:port` from a daemon thread, with `streamctl.security`'s TLS and basic
    auth (`server.server_port` is the port it took). A port another process holds raises
    `PortInUse`, or with `any_port_if_taken` gives a free one instead."""
    if security.basic_auth_username:
        app = basic_auth(app, security.basic_auth_username, security.basic_auth_password)
    try:
        server = make_server(host, port, app, MetricsServer, handler_class=_QuietHandler)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        if not any_port_if_taken:
            raise PortInUse(f"port {port} is in use on {host}") from exc
        server = make_server(host, 0, app, MetricsServer, handler_class=_QuietHandler)
    if security.tls_cert_file:
        server.socket = _tls_context(security).wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name=f"metrics-{port}", daemon=True).start()
    return server


def _tls_context(security: EndpointSecurity) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(security.tls_cert_file, security.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise EndpointSecurityError(
            f"{ENV_NAMES['tls_cert_file']}={security.tls_cert_file} with "
            f"{ENV_NAMES['tls_key_file']}={security.tls_key_file}: cannot load them as a "
            f"PEM certificate and its unencrypted key ({exc})") from exc
    return context


def basic_auth(app: WsgiApp, username: str, password: str) -> WsgiApp:
    """`app` for requests with these credentials; 401 with a challenge for any other."""
    expected = b"Basic " + base64.b64encode(f"{username}:{password}".encode())

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [
            ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'),
            ("Content-Type", "text/plain; charset=utf-8")])
        return [b"401 Unauthorized: this endpoint needs its basic-auth credentials\n"]

    return guarded
