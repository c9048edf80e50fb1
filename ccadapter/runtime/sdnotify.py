"""systemd's notify protocol (``sd_notify``), for ``Type=notify`` units: a datagram to
``$NOTIFY_SOCKET``. Nothing happens where that variable is unset (not under systemd). The
protocol is two lines of code; a library for it would be a dependency for nothing."""

from __future__ import annotations

import os
import socket


def notify(state: str, env: dict[str, str] | None = None) -> bool:
    """Send e.g. ``READY=1`` or ``WATCHDOG=1``; True when a manager was told."""
    path = (env if env is not None else os.environ).get("NOTIFY_SOCKET", "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(state.encode(), address)
    except OSError:
        return False
    return True


def watchdog_interval(env: dict[str, str] | None = None) -> float | None:
    """Seconds between WATCHDOG=1 pings: half of ``$WATCHDOG_USEC``, None without one."""
    env = env if env is not None else dict(os.environ)
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid.isdigit() and int(pid) != os.getpid():
        return None
    return int(usec) / 2e6
