"""cc-backend's HTTP transport on requests: one Session, one HTTPAdapter whose connection
pool is sized to the delivery workers.

Settings are resolved once, when the session is made, by requests' own rules
(``Session.merge_environment_settings``, ``trust_env``): proxies from ``HTTPS_PROXY``,
``HTTP_PROXY`` and ``NO_PROXY``; the CA bundle from ``ccRestCaBundle``, else from
``REQUESTS_CA_BUNDLE`` (or ``CURL_CA_BUNDLE``), else the system's store (OpenSSL's default
paths -- not certifi's bundle, which a venv install would otherwise bring, and which knows
no site CA). Verification is always on.

The lean path, measured with ``tests/bench/delivery.py`` (see :meth:`HttpSession.post`):
one prepared request per endpoint, copied with a new body for each event, and sent by the
adapter itself: ``Session.request`` would merge environment settings, parse proxies and
build a cookie jar for every request, ``Session.send`` would still run hooks, cookies and
redirect handling we never want.

A kept-alive connection that the server closed while idle is noticed by urllib3 before it
is used; one the server closes while we send is retried once (:class:`_ResendOnce`), on
another connection. Resending is harmless: cc-backend answers a repeated start or stop with
422, which counts as delivered. A timeout is not retried here: the outbox's backoff is the
answer to a slow cc-backend, not a second wait of ``read_timeout``.

Errors are :class:`TransportError` with a short text of our own: requests' messages are long
and carry the URL; none of ours carries a header (the JWT travels in one).
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.utils import select_proxy
from urllib3 import HTTPConnectionPool
from urllib3.exceptions import ReadTimeoutError
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry


class TransportError(Exception):
    """No HTTP answer. ``kind`` is one of refused, timeout, untrusted (the certificate),
    tls (the handshake), dns, lost, proxy, other; the message is short, has no URL and
    never a request header."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(text)
        self.kind = kind


@dataclass(frozen=True)
class Reply:
    status: int
    data: bytes


class _ResendOnce(Retry):
    """urllib3's retry policy for our POSTs: once more when the connection dropped before
    the answer came (a kept-alive connection the server closed meanwhile), never after a
    refused connection, a TLS error or a timeout, and never for an HTTP status (5xx is
    :class:`ccadapter.cc.client.CcClient`'s business)."""

    def __init__(self, **kwargs: Any) -> None:
        # Retry.new() passes every field back in; first use: the policy above.
        settings = {"total": 1, "connect": 0, "read": 1, "redirect": 0, "status": 0,
                    "other": 0, "allowed_methods": None, "raise_on_status": False,
                    "respect_retry_after_header": False, "backoff_factor": 0}
        super().__init__(**{**settings, **kwargs})

    def increment(self, method: str | None = None, url: str | None = None,
                  response: BaseHTTPResponse | None = None, error: Exception | None = None,
                  _pool: Any = None, _stacktrace: TracebackType | None = None) -> _ResendOnce:
        if isinstance(error, ReadTimeoutError):  # urllib3 counts it as a read error
            raise error.with_traceback(_stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)


class _PoolPerOrigin(HTTPAdapter):
    """An HTTPAdapter that finds the connection pool of a request once per origin, TLS
    settings and client certificate, not anew for every request: requests builds the pool
    key (URL parsing, TLS context arguments, urllib3's key normalising) on each send, a
    share of every delivery's CPU, to find the same pool of the one cc-backend we talk to. Through
    ``get_connection_with_tls_context``, requests' hook for subclasses; a request through a
    proxy is left to requests. urllib3 2 never closes a pool it handed out (its pool manager
    forgets pools, at ``clear`` or when it holds too many, but leaves them open), so a pool
    kept here stays usable until :meth:`close`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pools: dict[tuple[str, str, str], HTTPConnectionPool] = {}

    def get_connection_with_tls_context(self, request: requests.PreparedRequest,
                                        verify: bool | str | None,
                                        proxies: Mapping[str, str] | None = None,
                                        cert: Any = None) -> HTTPConnectionPool:
        scheme, _, rest = (request.url or "").partition("://")
        key = (f"{scheme}://{rest.split('/', 1)[0]}", repr(verify), repr(cert))
        pool = self._pools.get(key)
        if pool is None:  # whether a proxy applies is asked on a miss only; a proxied
            # request is never kept (requests decides it anew each time)
            pool = super().get_connection_with_tls_context(request, verify, proxies, cert)
            if not (proxies and select_proxy(request.url, dict(proxies))):
                self._pools[key] = pool
        return pool

    def close(self) -> None:
        self._pools.clear()
        super().close()


def system_ca() -> str | bool:
    """The system's CA store as requests' ``verify`` wants it: OpenSSL's default file, or
    its directory; True (certifi) only where the system has neither."""
    paths = ssl.get_default_verify_paths()
    if paths.cafile and os.path.isfile(paths.cafile):
        return paths.cafile
    if paths.capath and os.path.isdir(paths.capath):
        return paths.capath
    return True


class HttpSession:
    def __init__(self, base_url: str, headers: Mapping[str, str], *, pool_size: int,
                 connect_timeout: float, read_timeout: float,
                 ca_bundle: str | None = None) -> None:
        """``pool_size``: the most requests in flight at once (the delivery workers, plus
        one for a reconciler's read); more would wait for a free connection, never open
        another one."""
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers)
        self._timeout = (connect_timeout, read_timeout)
        self._session = requests.Session()
        self._session.verify = system_ca()
        self._adapter = _PoolPerOrigin(pool_connections=1, pool_maxsize=pool_size,
                                       pool_block=True, max_retries=_ResendOnce())
        for prefix in ("http://", "https://"):
            self._session.mount(prefix, self._adapter)
        env = self._session.merge_environment_settings(self.base_url, {}, False,
                                                       ca_bundle or None, None)
        self._proxies: dict[str, str] = env["proxies"]
        self._verify: str | bool = env["verify"]
        self._templates: dict[tuple[str, str], requests.PreparedRequest] = {}

    def __repr__(self) -> str:  # the headers hold the JWT
        return f"HttpSession({self.base_url!r})"

    def post(self, path: str, body: bytes, method: str = "POST",
             auth: Mapping[str, str] | None = None) -> Reply:
        """POST (or ``method``: PATCH) a JSON body (already encoded), with the headers of
        ``auth`` besides the session's (the token, which may change while the session
        lives). The request is a copy of one prepared per method and path: preparing it
        anew (URL parsing, header merging) costs more than the copy."""
        template = self._templates.get((method, path))
        if template is None:
            template = requests.Request(method, self.base_url + path,
                                        headers=self._headers).prepare()
            self._templates[(method, path)] = template
        request = template.copy()
        request.body = body
        request.headers["Content-Length"] = str(len(body))
        request.headers.update(auth or {})
        return self._send(request)

    def get(self, path: str, auth: Mapping[str, str] | None = None) -> Reply:
        """GET ``path`` (with its query string)."""
        return self._send(requests.Request("GET", self.base_url + path,
                                           headers={**self._headers, **(auth or {})}
                                           ).prepare())

    def _send(self, request: requests.PreparedRequest) -> Reply:
        try:
            response = self._adapter.send(request, stream=False, timeout=self._timeout,
                                          verify=self._verify, cert=None,
                                          proxies=self._proxies)
            return Reply(response.status_code, response.content)
        except requests.RequestException as exc:
            raise _transport_error(exc, self._timeout) from None
        except OSError as exc:  # e.g. the CA bundle vanished: requests checks it per request
            raise TransportError("other", f"{type(exc).__name__}: {exc.strerror or exc}") \
                from None

    def close(self) -> None:
        self._session.close()


def _root(exc: BaseException) -> BaseException:
    """The innermost cause of a requests exception: requests wraps urllib3's MaxRetryError,
    which wraps urllib3's error, which wraps the socket's or ssl's."""
    seen = {id(exc)}
    while True:
        inner = getattr(exc, "reason", None)
        if not isinstance(inner, BaseException):
            inner = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) \
                else exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _transport_error(exc: requests.RequestException,
                     timeout: tuple[float, float]) -> TransportError:
    root = _root(exc)
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return TransportError("timeout", f"no connection within {timeout[0]:g} s")
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return TransportError("timeout", f"no answer within {timeout[1]:g} s")
    if isinstance(exc, requests.exceptions.SSLError):
        if isinstance(root, ssl.SSLCertVerificationError):
            return TransportError("untrusted", "TLS: certificate not trusted "
                                         f"({root.verify_message or root.reason})")
        reason = getattr(root, "reason", None) or type(root).__name__
        return TransportError("tls", f"TLS handshake failed ({reason})")
    if isinstance(exc, requests.exceptions.ProxyError):
        return TransportError("proxy", f"the proxy failed ({_os_text(root)})")
    if isinstance(root, socket.gaierror):
        return TransportError("dns", "host name not found")
    if isinstance(root, ConnectionRefusedError):
        return TransportError("refused", "connection refused")
    if isinstance(exc, requests.exceptions.ConnectionError) and not isinstance(
            root, ConnectionResetError | BrokenPipeError) and isinstance(root, OSError) \
            and root.errno is not None:
        return TransportError("refused", f"cannot connect ({_os_text(root)})")
    if isinstance(exc, requests.exceptions.ConnectionError):
        return TransportError("lost", "connection closed without an answer")
    return TransportError("other", type(exc).__name__)


def _os_text(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__
