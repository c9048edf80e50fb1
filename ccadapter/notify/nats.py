"""Publishing to NATS from the daemon's threads.

nats-py is asyncio and the daemon is threads: the publisher owns one event loop in a thread
of its own, and :meth:`NatsPublisher.publish` blocks the calling delivery worker on a future.

The connection is made in the background and kept forever (nats-py reconnects with a fixed
wait, and a closed connection is replaced). While it is down, :meth:`publish` answers "not
published" at once instead of letting nats-py buffer the message for a later reconnect: the
outbox holds the event and tries again with backoff, so nothing waits in memory and nothing
is sent twice because a buffered copy went out after we had given up on it.

Core NATS: a publish counts once the server answered the PING that follows it (``flush``),
so it reached the server. JetStream: once the stream acknowledged it; the ``Nats-Msg-Id``
header lets the stream drop a resend inside its duplicate window (a crash between the
acknowledgement and the outbox's record of it).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
import nats.js.errors

from ccadapter.config.keys import Config
from ccadapter.config.secrets import safe_url
from ccadapter.notify.message import Message, Published
from ccadapter.report.loggate import LogGate
from ccadapter.retry import RetryPolicies, RetryPolicy

log = logging.getLogger(__name__)

_AUTH_KEYS = "natsUser/natsPassword, natsCredsFile or natsNKeySeedFile"


@dataclass(frozen=True)
class NatsOptions:
    """How to reach the NATS server. The URL may carry ``user:password@`` (natsServer as a
    URL): reprs show it without them."""

    url: str = field(repr=False)
    jetstream: bool = False
    user: str = ""
    password: str = field(default="", repr=False)
    creds_file: str = ""
    nkey_seed_file: str = ""
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    publish_timeout: float = 5.0
    reconnect_wait: float = 2.0

    @classmethod
    def from_config(cls, config: Config) -> NatsOptions:
        return cls(url=config.nats_url(), jetstream=config.nats_jetstream, user=config.nats_user,
                   password=config.nats_secret(), creds_file=config.nats_creds_file,
                   nkey_seed_file=config.nats_nkey_seed_file,
                   tls_ca_file=config.nats_tls_ca_file,
                   tls_cert_file=config.nats_tls_cert_file,
                   tls_key_file=config.nats_tls_key_file,
                   publish_timeout=config.nats_publish_timeout)

    def __repr__(self) -> str:
        return f"NatsOptions({safe_url(self.url)!r}, jetstream={self.jetstream})"

    def tls_context(self) -> ssl.SSLContext | None:
        if not (self.tls_ca_file or self.tls_cert_file or self.url.startswith("tls://")):
            return None
        ctx = ssl.create_default_context(cafile=self.tls_ca_file or None)
        if self.tls_cert_file:
            ctx.load_cert_chain(self.tls_cert_file, self.tls_key_file or None)
        return ctx


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if "authorization violation" in text.lower() or isinstance(exc, nats.errors.AuthorizationError):
        return f"the server refused our credentials ({text}): check {_AUTH_KEYS}"
    return text


class NatsPublisher:
    def __init__(self, options: NatsOptions, retry: RetryPolicy | None = None) -> None:
        """``retry``: how long to wait before connecting again after our side was refused
        (a refused or unreachable server nats-py retries by itself)."""
        self.options = options
        self.retry = retry or RetryPolicies().nats_connect
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nats",
                                        daemon=True)
        self._nc: Any = None
        self._js: Any = None
        self._stopping = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._gate = LogGate()
        self.last_error = "not connected yet"

    def __repr__(self) -> str:  # options hold the password
        return f"NatsPublisher({safe_url(self.options.url)!r})"

    # --- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._spawn_connect(), self._loop).result(10)

    def close(self) -> None:
        if not self._thread.is_alive():  # never started: only the loop to give back
            if not self._loop.is_closed():
                self._loop.close()
            return
        self._stopping = True
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(15)
        except (TimeoutError, RuntimeError) as exc:
            log.warning("NATS: shutdown incomplete: %s", describe(exc))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    async def _spawn_connect(self) -> None:
        task = asyncio.ensure_future(self._connect_until_done())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect_until_done(self) -> None:
        """nats-py retries a refused or unreachable server forever by itself; what it
        raises is a problem on our side (an unreadable creds file, a bad TLS key): said,
        then tried again after the policy's delay (up to a minute), in case the admin fixed
        it meanwhile."""
        failures = 0
        while not self._stopping:
            nc = nats.NATS()
            try:
                await nc.connect(**self._connect_kwargs())
            except asyncio.CancelledError:
                await self._close_client(nc)
                raise
            except Exception as exc:
                self.last_error = describe(exc)  # before the close yields to a publish
                log.error("NATS: cannot connect to %s: %s", safe_url(self.options.url),
                          self.last_error)
                await self._close_client(nc)
                failures += 1
                await asyncio.sleep(self.retry.delay(failures))
                continue
            self._js = nc.jetstream(timeout=self.options.publish_timeout) \
                if self.options.jetstream else None
            self._nc = nc
            self.last_error = ""
            log.info("NATS: connected to %s (%s)", safe_url(self.options.url),
                     "JetStream" if self.options.jetstream else "core NATS")
            return

    @staticmethod
    async def _close_client(nc: Any) -> None:
        """Closes a nats-py client, at most 5 s. Also for a connect cut short (by shutdown,
        or by a refusal we retry ourselves): it may hold the socket of its last attempt,
        which nats-py closes only in ``close``."""
        try:
            await asyncio.wait_for(nc.close(), 5)
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            log.debug("NATS: close: %s", describe(exc))

    def _connect_kwargs(self) -> dict[str, Any]:
        o = self.options
        kwargs: dict[str, Any] = {
            "servers": [o.url], "name": "ccadapter", "allow_reconnect": True,
            "max_reconnect_attempts": -1, "reconnect_time_wait": o.reconnect_wait,
            "connect_timeout": max(1, int(o.publish_timeout)),
            "error_cb": self._on_error, "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected, "closed_cb": self._on_closed,
        }
        if o.user:
            kwargs.update(user=o.user, password=o.password)
        if o.creds_file:
            kwargs["user_credentials"] = o.creds_file
        elif o.nkey_seed_file:
            kwargs["nkeys_seed"] = o.nkey_seed_file
        if (tls := o.tls_context()) is not None:
            kwargs["tls"] = tls
        return kwargs

    async def _shutdown(self) -> None:
        # Each task closes its own unfinished connect on the way out. A cancel can be lost:
        # Python 3.11's asyncio.wait_for (nats-py's connect waits in it) returns the result
        # of an inner future done at the moment of the cancel and drops the cancel
        # (bpo-42130, gh-86296): the connect then waits for the server's INFO for its whole
        # timeout. So a task still running half a second later is cancelled again.
        until = time.monotonic() + 6
        while (tasks := [t for t in self._tasks if not t.done()]) and time.monotonic() < until:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=0.5)
        if self._nc is not None and not self._nc.is_closed:
            await self._close_client(self._nc)

    # --- callbacks (on the loop) ---------------------------------------------------------

    async def _on_error(self, exc: Exception) -> None:
        self.last_error = describe(exc)
        if self._gate.allow(self.last_error):
            log.error("NATS %s: %s (retrying every %.0f s; events wait in the outbox)",
                      safe_url(self.options.url), self.last_error,
                      self.options.reconnect_wait)

    async def _on_disconnected(self) -> None:
        if not self._stopping:
            self.last_error = "disconnected, reconnecting"
            log.warning("NATS: disconnected from %s; reconnecting (events wait in the "
                        "outbox)", safe_url(self.options.url))

    async def _on_reconnected(self) -> None:
        self.last_error = ""
        log.info("NATS: reconnected to %s", safe_url(self.options.url))

    async def _on_closed(self) -> None:
        """nats-py gave up on the connection we publish on: make a new one. A connect we
        cut short closes too, but is no connection of ours yet (``_nc`` is None)."""
        if not self._stopping and self._nc is not None:
            log.warning("NATS: connection closed; connecting again")
            self._nc = self._js = None
            await self._spawn_connect()

    # --- publishing ----------------------------------------------------------------------

    def publish(self, msg: Message) -> Published:
        """Publishes on ``msg.subject``; blocks until the server (core) or the stream
        (JetStream) has the message, or says why not. Never raises for a NATS problem."""
        if self._stopping or not self._thread.is_alive():
            return Published(False, "publisher stopped")
        fut = asyncio.run_coroutine_threadsafe(self._publish(msg), self._loop)
        try:
            return fut.result(self.options.publish_timeout + 2)
        except TimeoutError:
            fut.cancel()
            return Published(False, f"no answer within {self.options.publish_timeout} s")

    async def _publish(self, msg: Message) -> Published:
        nc, js, o = self._nc, self._js, self.options
        if nc is None or not nc.is_connected:
            return Published(False, f"not connected: {self.last_error or 'reconnecting'}")
        try:
            if js is not None:
                ack = await js.publish(msg.subject, msg.data, timeout=o.publish_timeout,
                                       headers={"Nats-Msg-Id": msg.msg_id})
                return Published(True, duplicate=bool(ack.duplicate))
            await nc.publish(msg.subject, msg.data)
            await nc.flush(timeout=o.publish_timeout)
            return Published(True)
        except nats.errors.MaxPayloadError as exc:
            return Published(False, f"message of {len(msg.data)} bytes: {describe(exc)}",
                             permanent=True)
        except nats.js.errors.NoStreamResponseError:
            return Published(False, f"no JetStream stream takes subject {msg.subject!r}: "
                             f"create one, e.g. `nats stream add --subjects {msg.subject} "
                             f"--dupe-window 1h`, or set natsJetStream to false")
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error, OSError) as exc:
            return Published(False, describe(exc))
