"""``ccadapter hook``: run by slurmctld as PrologSlurmctld/EpilogSlurmctld for every job.

It sends the job's ``SLURM_*`` environment as one JSON message to the daemon's socket and
exits 0 whatever happens: a failing PrologSlurmctld would hold jobs, so every problem is only
said on stderr (slurmctld logs it). It gives up after one second in all.

It imports only interpreter built-ins: the interpreter's start is the floor of its cost, and
every module counts (click, pydantic and friends would cost every job many times the
interpreter's start; even ``json`` and ``socket`` cost about as much again as the interpreter,
because they pull in ``re`` and ``enum``). So it writes its one JSON object itself, reads the
one key it needs from the config file itself, and talks through ``_socket``. Run it so that its
compiled form is used (a script given by path is compiled anew on every run), as
``hooks/ccadapter-hook.sh`` does for a UNIX socket; a TCP socket that script tells in bash
alone, cheaper still (BENCHMARKS.md, "What the hook and the daemon cost the controller
host")::

    python3 -I -S -c "import sys; sys.path.insert(0, '.../ccadapter/prep'); import hook; \\
        sys.exit(hook.main())" --config /etc/cc-slurm-adapter/config.json

Where to send: ``--socket SPEC``, else ``prepSockConnectPath`` of the config file (``--config``,
``$CCADAPTER_CONFIG`` or ``/etc/cc-slurm-adapter/config.json``), else the default path.
SPEC is ``/path``, ``unix:/path``, ``tcp:HOST:PORT``, ``tcp:[V6]:PORT`` or ``tcp::PORT``.

It runs as SlurmUser and needs no secret. A config file it may not read (one that holds the
JWT, readable by the daemon alone) means the default path; only if sending there fails too
does stderr say so, naming the file.
"""

from __future__ import annotations

import _socket
import posix  # not os: os imports more, and posix.environ is all we need
import sys
import time

DEFAULT_SOCKET = "/run/cc-slurm-adapter/daemon.sock"
DEFAULT_CONFIG = "/etc/cc-slurm-adapter/config.json"
BUDGET = 1.0  # seconds for everything
MAX_MESSAGE = 64 * 1024


def parse_spec(spec: str) -> tuple[int, object]:
    """Socket family and address for a prepSock*Path value (cc-slurm-adapter's formats).
    The one reader of the spec, for the hook and the daemon alike: its socket types stay
    plain words, as the hook imports no ``enum``."""
    proto, sep, rest = spec.partition(":")
    if not sep or proto.startswith("/"):
        return _socket.AF_UNIX, spec
    proto = proto.lower()
    if proto == "unix":
        return _socket.AF_UNIX, rest
    if proto != "tcp":
        raise ValueError(f"unknown socket type {proto!r} in {spec!r}")
    host, _, port = rest.rpartition(":")
    if not port.isdigit() or (not host and ":" not in rest):
        raise ValueError(f"no port in {spec!r} (tcp:HOST:PORT, tcp:[V6]:PORT or tcp::PORT)")
    if not 0 < int(port) < 65536:
        raise ValueError(f"port {port} in {spec!r}: a port is 1 to 65535")
    if host.startswith("[") and host.endswith("]"):
        return _socket.AF_INET6, (host[1:-1], int(port))
    if not host:  # "tcp::PORT": the local machine
        return _socket.AF_INET, ("127.0.0.1", int(port))
    return (_socket.AF_INET6 if ":" in host else _socket.AF_INET), (host, int(port))


def socket_from_config(path: str) -> str | None:
    """``prepSockConnectPath`` of a JSON config file, key matched case-insensitively (like
    the daemon and Go), read without the json module."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    key = '"prepsockconnectpath"'
    at = text.lower().find(key)
    if at < 0:
        return None
    rest = text[at + len(key):].lstrip()
    if not rest.startswith(":"):
        raise ValueError(f"{path}: no value after prepSockConnectPath")
    return _json_string(rest[1:].lstrip(), path) or None


_UNESCAPE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
             "t": "\t"}


def _json_string(text: str, where: str) -> str:
    if not text.startswith('"'):
        raise ValueError(f"{where}: prepSockConnectPath is not a string")
    out, i = [], 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return "".join(out)
        if c == "\\":
            nxt = text[i + 1:i + 2]
            if nxt == "u":
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_UNESCAPE.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    raise ValueError(f"{where}: unterminated string for prepSockConnectPath")


def _json_str(value: str) -> str:
    if value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'
    out = []
    for c in value:
        code = ord(c)
        if c in '"\\':
            out.append("\\" + c)
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF or code == 0x7F:
            out.append(f"\\u{code:04x}")  # control characters, undecodable bytes
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def build_message(env: dict[str, str]) -> bytes:
    """The ``SLURM_*`` variables as one JSON object (json.loads reads it back exactly)."""
    pairs = [(k, v) for k, v in env.items() if k.startswith("SLURM_")]
    pairs.append(("CCADAPTER_HOOK_SENT", repr(time.time())))
    body = "{" + ",".join(f"{_json_str(k)}:{_json_str(v)}" for k, v in pairs) + "}"
    data = body.encode("utf-8")
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def send(spec: str, data: bytes, deadline: float) -> None:
    family, address = parse_spec(spec)
    sock = _socket.socket(family, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        sock.connect(address)
        sock.sendall(data)
        sock.shutdown(_socket.SHUT_WR)
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        sock.recv(16)  # the daemon's "ok" (or EOF): the message is in its hands
    finally:
        sock.close()


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    deadline = time.monotonic() + BUDGET
    args = list(sys.argv[1:] if argv is None else argv)
    env = _slurm_environment() if env is None else dict(env)
    note = ""
    try:
        spec = _option(args, "--socket")
        if spec is None:
            config = _option(args, "--config") or env.get("CCADAPTER_CONFIG", DEFAULT_CONFIG)
            try:
                spec = socket_from_config(config)
            except PermissionError:
                note = f"; {config} is not readable by this user, so the default socket was used"
            spec = spec or DEFAULT_SOCKET
        send(spec, build_message(env), deadline)
    except Exception as exc:  # never fail the job: say it and exit 0
        job = env.get("SLURM_JOB_ID", "?")
        print(f"ccadapter hook: job {job}: daemon not told ({type(exc).__name__}: {exc}"
              f"{note}); the poll will pick the job up", file=sys.stderr)
    return 0


def _slurm_environment() -> dict[str, str]:
    return {k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
            for k, v in posix.environ.items() if k.startswith(b"SLURM_")}


def _option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


if __name__ == "__main__":
    sys.exit(main())
