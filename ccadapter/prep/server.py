"""The daemon's end of the hook: UNIX and TCP listeners on one selector thread.

Each connection carries one message, ended by the sender's shutdown (the Python hook) or by
a newline (the bash hook, which cannot shut one side of a socket; it stays connected until
the "ok", as the kernel names a TCP peer's uid only while its socket is open). A connection
gets a second to deliver at most 64 KiB; what is too large, too slow or not a valid message
is dropped, and the server goes on. Valid messages go to ``on_message``, which may refuse
one by raising :class:`BadMessage` (a cluster it does not serve); drops are told to
``on_drop`` with their :class:`DropReason` and a detail for the log
(:class:`~ccadapter.prep.tally.HookTally` counts them and says them in a few lines).

Whoever reaches a TCP socket, or is in the UNIX socket's group, may send anything, so what
one flood can cost is bounded: with ``allowed`` networks (``prepSockAllowedPeers``) a TCP
connection from elsewhere is closed unread; at most :data:`MAX_CONNECTIONS` connections are
read at once, so the buffers of half-sent messages take at most 16 MiB. Each connection's
sender is known by what the kernel says of it (:class:`~ccadapter.prep.peers.Peer`): one that
is not slurmctld's own may hold :data:`PER_PEER` of them, and all such together
:data:`MAX_CONNECTIONS` less :data:`RESERVE`; a connection beyond that is closed at once
(``connections``). So idle or slow connections never take the socket from slurmctld's own
hooks, whose messages are read within their second; only when they hold every connection
do new ones wait in the kernel's listen queue, as a slow daemon's would.

Every socket has the cluster its messages belong to when they do not name one: ``cluster``
for the ``specs``, and each of ``cluster_specs`` its own (one daemon serving the hooks of
several clusters, ``prepSockClusterListenPaths``).
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import selectors
import socket
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ccadapter.prep.hook import parse_spec
from ccadapter.prep.messages import (
    MAX_MESSAGE,
    BadMessage,
    DropReason,
    HookMessage,
    parse_message,
)
from ccadapter.prep.peers import Network, Peer, PeerIdentity, ip_of

log = logging.getLogger(__name__)

_READ_TIMEOUT = 1.0
MAX_CONNECTIONS = 256  # read at once; 256 x 64 KiB of buffers at most
RESERVE = 64  # of those, never held by senders that are not slurmctld's own
PER_PEER = 8  # held by one sender that is not slurmctld's own


class PrepServer:
    def __init__(self, specs: list[str], cluster: str | None,
                 on_message: Callable[[HookMessage], None], group: str | None = None,
                 on_drop: Callable[[DropReason, str], None] | None = None,
                 cluster_specs: Mapping[str, str] | None = None,
                 allowed: Sequence[Network] = (),
                 identity: PeerIdentity | None = None) -> None:
        """``cluster_specs``: socket spec -> the cluster whose hook sends there.
        ``allowed``: the networks TCP peers must be in (empty: any peer). ``identity``:
        tells each connection's sender (by default: root and this process's user are
        slurmctld's own, and the ``allowed`` hosts)."""
        # every socket spec -> the cluster of its messages that name none
        self._spec_clusters = {**dict.fromkeys(specs, cluster), **(cluster_specs or {})}
        self.specs = list(self._spec_clusters)
        self.cluster = cluster
        self.on_message = on_message
        self.on_drop = on_drop
        self.group = group
        self.allowed = tuple(allowed)
        self.identity = identity or PeerIdentity(allowed=self.allowed)
        self._paused = False  # listeners out of the selector: MAX_CONNECTIONS being read
        self._sel = selectors.DefaultSelector()
        self._listeners: dict[socket.socket, str | None] = {}  # -> the socket's cluster
        self._paths: list[Path] = []
        # each connection being read: (its bytes, when it opened, its cluster, its sender)
        self._conns: dict[socket.socket, tuple[bytearray, float, str | None, Peer]] = {}
        self._held: Counter[str] = Counter()  # connections held by each sender not reserved
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="prep-server", daemon=True)

    def start(self) -> PrepServer:
        """Raises OSError (its ``filename`` the spec) when a socket cannot be listened on."""
        for spec, cluster in self._spec_clusters.items():
            try:
                self._listen(spec, cluster)
            except OSError as exc:
                exc.filename = spec
                raise
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in [*self._listeners, *self._conns]:
            sock.close()
        for path in self._paths:
            path.unlink(missing_ok=True)
        self._sel.close()

    def _listen(self, spec: str, cluster: str | None) -> None:
        family, address = parse_spec(spec)
        sock = socket.socket(family, socket.SOCK_STREAM)
        if family == socket.AF_UNIX:
            path = Path(address)
            if path.exists() and stat.S_ISSOCK(path.stat().st_mode):
                path.unlink()  # left by a crash; the PID lock says no daemon owns it
            path.parent.mkdir(parents=True, exist_ok=True)
            sock.bind(str(path))
            os.chmod(path, 0o660)
            if self.group:
                os.chown(path, -1, grp.getgrnam(self.group).gr_gid)
            self._paths.append(path)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
        self._sel.register(sock, selectors.EVENT_READ, "listener")
        self._listeners[sock] = cluster
        log.info("listening for Prolog/Epilog messages on %s%s", spec,
                 f" (cluster {cluster})" if cluster and cluster != self.cluster else "")

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.2):
                try:
                    if key.data == "listener":
                        self._accept(key.fileobj)
                    else:
                        self._read(key.fileobj)
                except Exception:
                    # One thread serves every hook: an unforeseen error (a bug in parsing or
                    # in on_message) must cost this connection only, not every later job's
                    # message until a restart. The hook then exits 0 unanswered; the poll
                    # picks the job up.
                    log.exception("hook connection failed; closed without an answer")
                    if key.data != "listener":
                        self._close(key.fileobj)
            self._expire()

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, peer = listener.accept()
        except OSError:
            return
        try:
            self._admit(conn, peer, listener)
        except Exception:  # said by the loop; the connection is not left open meanwhile
            if conn in self._conns:
                self._close(conn)
            else:
                conn.close()
            raise

    def _admit(self, conn: socket.socket, peer: object, listener: socket.socket) -> None:
        """Reads ``conn`` from now on, or closes it: a TCP peer outside ``allowed``, or a
        sender other than slurmctld's own holding its share of connections."""
        if self.allowed and conn.family != socket.AF_UNIX and not self._allowed(
                peer[0]):  # type: ignore[index]
            self._drop(DropReason.PEER, f"connection from {peer[0]}")  # type: ignore[index]
            conn.close()
            return
        sender = self.identity.of(conn, peer)
        if not sender.reserved and (self._held[sender.key] >= PER_PEER or sum(
                self._held.values()) >= MAX_CONNECTIONS - RESERVE):
            self._drop(DropReason.CONNECTIONS, f"connection from {sender.key}, which holds "
                       f"{self._held[sender.key]} (of {PER_PEER} a sender, "
                       f"{MAX_CONNECTIONS - RESERVE} all but slurmctld's)")
            conn.close()
            return
        if not sender.reserved:
            self._held[sender.key] += 1
        conn.setblocking(False)
        self._conns[conn] = (bytearray(), time.monotonic(), self._listeners.get(listener),
                             sender)
        self._sel.register(conn, selectors.EVENT_READ, "conn")
        if len(self._conns) >= MAX_CONNECTIONS:
            self._pause(True)

    def _allowed(self, host: str) -> bool:
        address = ip_of(host)
        return any(address in net for net in self.allowed)

    def _pause(self, paused: bool) -> None:
        """Stop (or resume) accepting: connections beyond MAX_CONNECTIONS (slurmctld's own
        hooks use the RESERVE) wait in the listen queue, whose hooks give up after their
        second as for a busy daemon."""
        if paused == self._paused:
            return
        self._paused = paused
        for sock in self._listeners:
            if paused:
                self._sel.unregister(sock)
            else:
                self._sel.register(sock, selectors.EVENT_READ, "listener")

    def _read(self, conn: socket.socket) -> None:
        buf, _, cluster, sender = self._conns[conn]
        try:
            chunk = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
            buf.clear()
        if chunk:
            line_end = chunk.find(b"\n")
            buf.extend(chunk if line_end < 0 else chunk[:line_end])
            if len(buf) > MAX_MESSAGE:
                self._drop(DropReason.TOO_LARGE, f"message over {MAX_MESSAGE} bytes")
                self._close(conn)
                return
            if line_end < 0:
                return
        self._handle(conn, bytes(buf), cluster, sender)

    def _handle(self, conn: socket.socket, data: bytes, cluster: str | None,
                sender: Peer) -> None:
        try:
            msg = parse_message(data, cluster, sender)
            self.on_message(msg)
        except BadMessage as exc:
            self._drop(DropReason.INVALID, str(exc))
        else:
            with contextlib.suppress(OSError):
                conn.sendall(b"ok\n")
        self._close(conn)

    def _expire(self) -> None:
        now = time.monotonic()
        for conn, (_, opened, _, _) in list(self._conns.items()):
            if now - opened > _READ_TIMEOUT:
                self._drop(DropReason.TIMEOUT, "no complete message within 1 s")
                self._close(conn)

    def _drop(self, reason: DropReason, detail: str) -> None:
        if self.on_drop:
            self.on_drop(reason, detail)
        else:
            log.warning("hook message dropped (%s): %s", reason, detail)

    def _close(self, conn: socket.socket) -> None:
        entry = self._conns.pop(conn, None)
        if entry is not None and not entry[3].reserved:
            self._held[entry[3].key] -= 1
            if self._held[entry[3].key] <= 0:
                del self._held[entry[3].key]
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn)
        conn.close()
        if len(self._conns) < MAX_CONNECTIONS:
            self._pause(False)
