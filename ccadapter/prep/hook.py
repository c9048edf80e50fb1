"""``ccadapter hook``: run by slurmctld as PrologSlurmctld/EpilogSlurmctld for every job.

It sends the job's ``SLURM_*`` environment as one JSON message to the daemon's socket and
exits 0 whatever happens: a failing PrologSlurmctld would hold jobs, so every problem is only
said on stderr (slurmctld logs it). It gives up after one second in all.

Only the standard library is imported (the interpreter's start is the floor of its cost;
click, pydantic and friends would add about 400 ms to every job). Run it as
``python3 -I -S /path/to/ccadapter/prep/hook.py [--config PATH]`` (``hooks/ccadapter-hook.sh``).

Where to send: ``--socket SPEC``, else ``prepSockConnectPath`` of the config file (``--config``,
``$CCADAPTER_CONFIG`` or ``/etc/cc-slurm-adapter/config.json``), else the default path.
SPEC is ``/path``, ``unix:/path``, ``tcp:HOST:PORT``, ``tcp:[V6]:PORT`` or ``tcp::PORT``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

DEFAULT_SOCKET = "/run/cc-slurm-adapter/daemon.sock"
DEFAULT_CONFIG = "/etc/cc-slurm-adapter/config.json"
BUDGET = 1.0  # seconds for everything
MAX_MESSAGE = 64 * 1024


def parse_spec(spec: str) -> tuple[int, object]:
    """Socket family and address for a prepSock*Path value (cc-slurm-adapter's formats)."""
    proto, sep, rest = spec.partition(":")
    if not sep or proto.startswith("/"):
        return socket.AF_UNIX, spec
    proto = proto.lower()
    if proto == "unix":
        return socket.AF_UNIX, rest
    if proto != "tcp":
        raise ValueError(f"unknown socket type {proto!r} in {spec!r}")
    host, _, port = rest.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"no port in {spec!r}")
    if host.startswith("[") and host.endswith("]"):
        return socket.AF_INET6, (host[1:-1], int(port))
    if not host:  # "tcp::PORT": the local machine
        return socket.AF_INET, ("127.0.0.1", int(port))
    return (socket.AF_INET6 if ":" in host else socket.AF_INET), (host, int(port))


def socket_from_config(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    for key, value in data.items():  # case-insensitive, like the daemon and Go
        if key.lower() == "prepsockconnectpath" and isinstance(value, str) and value:
            return value
    return None


def build_message(env: dict[str, str]) -> bytes:
    body = {k: v for k, v in env.items() if k.startswith("SLURM_")}
    body["CCADAPTER_HOOK_SENT"] = repr(time.time())
    data = json.dumps(body, separators=(",", ":")).encode("utf-8", "surrogateescape")
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def send(spec: str, data: bytes, deadline: float) -> None:
    family, address = parse_spec(spec)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        sock.connect(address)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        sock.recv(16)  # the daemon's "ok" (or EOF): the message is in its hands


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    deadline = time.monotonic() + BUDGET
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    try:
        spec = _option(args, "--socket")
        if spec is None:
            config = _option(args, "--config") or env.get("CCADAPTER_CONFIG", DEFAULT_CONFIG)
            spec = socket_from_config(config) or DEFAULT_SOCKET
        send(spec, build_message(env), deadline)
    except Exception as exc:  # never fail the job: say it and exit 0
        job = env.get("SLURM_JOB_ID", "?")
        print(f"ccadapter hook: job {job}: daemon not told ({type(exc).__name__}: {exc}); "
              "the poll will pick the job up", file=sys.stderr)
    return 0


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


if __name__ == "__main__":
    sys.exit(main())
