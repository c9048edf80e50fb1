"""Who sent a hook message: the peer its share of slurmctld's questions and of the socket's
connections is counted for (:mod:`ccadapter.prep.shares`, :mod:`ccadapter.prep.server`).

slurmctld runs PrologSlurmctld and EpilogSlurmctld as SlurmUser, so the messages of real jobs
come from SlurmUser's uid (or root's, where slurmctld runs as root, or an administrator
running the hook by hand). Those keep a reserve no other peer can spend: they are *reserved*.
A peer is known by what the kernel says of it, never by what it writes:

- on a UNIX socket, by its uid (``SO_PEERCRED``): another member of the socket's group is
  another peer, whatever it sends;
- on TCP from this host (a loopback address, or one of this host's own), by the uid that
  owns its socket, which the kernel tells for one connection through ``sock_diag``
  (``NETLINK_SOCK_DIAG``, as ``ss -e`` reads it); where that cannot be asked (a unit without
  ``AF_NETLINK``) or the socket is no one's any more (closed by its process before the
  daemon accepted it: the kernel then says uid 0), by its address, not reserved;
- on TCP from another host, by its address: reserved when it is one of
  ``prepSockAllowedPeers`` (the administrator named the controller hosts), else not.

So one local user is one peer however many loopback addresses or connections it uses.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Peer:
    key: str  # "uid 64030", "10.1.2.3": what shares and connection caps are counted by
    reserved: bool = False  # slurmctld's own (SlurmUser, root), or a host the admin allowed


# a message handed over in-process, not read from a socket (the daemon's own callers, tests)
IN_PROCESS = Peer("in-process", reserved=True)

_SO_PEERCRED = struct.Struct("3i")  # pid, uid, gid
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
# inet_diag_req_v2: family, protocol, extensions, pad, states; then inet_diag_sockid:
# source and destination port (network order), source and destination address (16 bytes
# each, network order), interface, cookie (two words; all ones: none)
_DIAG_REQUEST = struct.Struct("=BBBBIHH16s16sIII")
_DIAG_UID_AT = _NLMSG_HEADER.size + 4 + 48 + 12  # inet_diag_msg's idiag_uid, idiag_inode


class PeerIdentity:
    """Tells the :class:`Peer` of an accepted connection. Root and this process's user are
    slurmctld's own (the latter's processes own the daemon anyway); ``slurm_user(uid)``:
    whether a local uid is SlurmUser; ``allowed``: the networks of ``prepSockAllowedPeers``."""

    def __init__(self, slurm_user: Callable[[int], bool] = lambda uid: False,
                 allowed: Sequence[Network] = ()) -> None:
        self.slurm_user = slurm_user
        self.allowed = tuple(allowed)
        self._own = {0, os.getuid()}

    def reserved_uid(self, uid: int) -> bool:
        return uid in self._own or self.slurm_user(uid)

    def of(self, conn: socket.socket, address: object) -> Peer:
        if conn.family == socket.AF_UNIX:
            try:
                _, uid, _ = _SO_PEERCRED.unpack(conn.getsockopt(
                    socket.SOL_SOCKET, socket.SO_PEERCRED, _SO_PEERCRED.size))
            except OSError:
                return Peer("unix, uid unknown")
            return Peer(f"uid {uid}", self.reserved_uid(uid))
        host = ip_of(str(address[0]))  # type: ignore[index]
        if host.is_loopback or host == _own_address(conn):
            uid = loopback_uid(conn)
            if uid is not None:
                return Peer(f"uid {uid}", self.reserved_uid(uid))
            return Peer(str(host))
        return Peer(str(host), any(host in net for net in self.allowed))


def _own_address(conn: socket.socket) -> object:
    """The address the connection reached on this host (a peer with the same one is a
    process of this host)."""
    try:
        return ip_of(str(conn.getsockname()[0]))
    except (OSError, ValueError):
        return None


def ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address of a peer, an IPv4-mapped IPv6 address as the IPv4 one it maps."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def loopback_uid(conn: socket.socket) -> int | None:
    """The uid owning the other end of an accepted TCP connection from this host: its
    socket's source is our peer's address, its destination ours. One exact lookup
    (``sock_diag``, no dump of every socket); None where it cannot be asked or found."""
    try:
        ours, theirs = conn.getsockname(), conn.getpeername()
        their_ip, our_ip = ip_of(theirs[0]), ip_of(ours[0])
    except (OSError, ValueError):
        return None
    family = socket.AF_INET if their_ip.version == 4 else socket.AF_INET6
    request = _DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF,
                                 socket.htons(theirs[1]), socket.htons(ours[1]),
                                 their_ip.packed.ljust(16, b"\0"),
                                 our_ip.packed.ljust(16, b"\0"), 0, 0xFFFFFFFF, 0xFFFFFFFF)
    header = _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY,
                                _NLM_F_REQUEST, 1, 0)
    try:
        diag = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):  # no AF_NETLINK here (RestrictAddressFamilies)
        return None
    with contextlib.closing(diag):
        try:
            diag.settimeout(0.2)
            diag.send(header + request)
            answer = diag.recv(8192)
        except OSError:
            return None
    if len(answer) < _DIAG_UID_AT + 8:
        return None
    _, kind, _, _, _ = _NLMSG_HEADER.unpack_from(answer)
    if kind != _SOCK_DIAG_BY_FAMILY:  # _NLMSG_ERROR: no such socket (it went away)
        return None
    uid, inode = struct.unpack_from("=II", answer, _DIAG_UID_AT)
    # inode 0: an orphan, closed by its process after sending; the kernel says uid 0 for
    # it, which is nobody's word: a stranger must not pass for root by closing early
    return None if inode == 0 else int(uid)
