"""A real nats-server (Debian's package) for the tests, on 127.0.0.1, with JetStream.

Each auth variant of issue 5 gets a server configured for it: user/password, an nkey, a
creds file (operator mode: operator, account and user JWTs made here with the nkeys
library, as `nsc` would), and TLS with a client certificate (openssl).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nkeys

from tests.conftest import unavailable

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class NatsServer:
    tmp: Path
    auth: str = ""  # extra config text (authorization, operator, tls blocks)
    jetstream: bool = True
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        js = (f'jetstream {{ store_dir: "{self.tmp / "js"}", max_memory_store: 64MB, '
              f'max_file_store: 256MB }}\n') if self.jetstream else ""
        return f"listen: 127.0.0.1:{self.port}\n{js}{self.auth}\n"

    def start(self) -> NatsServer:
        self.tmp.mkdir(parents=True, exist_ok=True)
        conf = self.tmp / "nats.conf"
        conf.write_text(self.config_text())
        log = (self.tmp / "nats.log").open("a")
        self.proc = subprocess.Popen([NATS_SERVER, "-c", str(conf)], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        until = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.time() > until:
                    raise RuntimeError(f"nats-server did not start: "
                                       f"{(self.tmp / 'nats.log').read_text()[-2000:]}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.proc = None

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def require_nats_server() -> None:
    if not os.path.exists(NATS_SERVER):
        unavailable(f"{NATS_SERVER} missing (tests/run installs the nats-server package)")


# --- reading what arrived -----------------------------------------------------------------

def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _stream_messages(url: str, stream: str, **auth: Any) -> list[bytes]:
    nc = await nats.connect(url, **auth)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        if not info.state.messages:
            return []
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            out.append(msg.data)
        return out
    finally:
        await nc.close()


def stream_messages(url: str, stream: str = "JOBS", **auth: Any) -> list[bytes]:
    return run(_stream_messages(url, stream, **auth))


async def _add_stream(url: str, stream: str, subject: str, **auth: Any) -> None:
    nc = await nats.connect(url, **auth)
    try:
        await nc.jetstream().add_stream(name=stream, subjects=[subject],
                                        duplicate_window=3600)
    finally:
        await nc.close()


def add_stream(url: str, stream: str = "JOBS", subject: str = "jobs", **auth: Any) -> None:
    run(_add_stream(url, stream, subject, **auth))


# --- credentials --------------------------------------------------------------------------

def new_keys(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(issuer: nkeys.KeyPair, subject: str, kind: str, extra: dict | None = None) -> str:
    """A NATS JWT (v2) as nsc writes it: ed25519-nkey signed, jti the claims' hash."""
    claims: dict[str, Any] = {"iat": int(time.time()), "iss": issuer.public_key.decode(),
                              "name": kind, "sub": subject,
                              "nats": {"type": kind, "version": 2, **(extra or {})}}
    claims["jti"] = base64.b32encode(
        hashlib.new("sha512_256", json.dumps(claims).encode()).digest()).decode().rstrip("=")
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    sig = issuer.sign(f"{head}.{body}".encode())
    return f"{head}.{body}.{_b64(sig)}"


def operator_setup(tmp: Path) -> tuple[str, Path]:
    """(server config text, creds file) for operator mode with one account and user."""
    op = new_keys(nkeys.PREFIX_BYTE_OPERATOR)
    acc = new_keys(nkeys.PREFIX_BYTE_ACCOUNT)
    user = new_keys(nkeys.PREFIX_BYTE_USER)
    unlimited = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                 "wildcards": True, "conn": -1, "leaf": -1}
    op_jwt = make_jwt(op, op.public_key.decode(), "operator")
    acc_jwt = make_jwt(op, acc.public_key.decode(), "account", {"limits": unlimited})
    user_jwt = make_jwt(acc, user.public_key.decode(), "user",
                        {"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1})
    (tmp / "op.jwt").write_text(op_jwt)
    creds = tmp / "user.creds"
    creds.write_text(
        f"-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n"
        f"------END USER NKEY SEED------\n")
    conf = (f'operator: "{tmp / "op.jwt"}"\nresolver: MEMORY\n'
            f'resolver_preload: {{ {acc.public_key.decode()}: "{acc_jwt}" }}\n')
    return conf, creds


def nkey_setup(tmp: Path) -> tuple[str, Path]:
    """(authorization block, seed file) for nkey authentication."""
    user = new_keys(nkeys.PREFIX_BYTE_USER)
    seed = tmp / "user.nk"
    seed.write_text(user.seed.decode() + "\n")
    return f"authorization {{ users = [ {{ nkey: {user.public_key.decode()} }} ] }}", seed


def tls_setup(tmp: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl)."""
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp,
                       stdin=subprocess.DEVNULL)
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    (tmp / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr")
        ssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", f"{name}.pem")
    return {n: tmp / n for n in ("ca.pem", "server.pem", "server.key", "client.pem",
                                 "client.key")}
