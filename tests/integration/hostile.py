"""What another user who reaches the hook socket could do (issue 36), run by the live tests
as that user (``nobody``, under Debian's python3: standard library only, no ccadapter).

    python3 hostile.py ATTACK SPEC CLUSTER IDS_FILE SECONDS [CONNECTIONS]

``flood``: one connection after another, each a kind of abuse: ids slurmctld never gave out
(far from its own, and a few again and again), garbage, 200 kB messages, messages never
finished; ``replay``: sends a start and an end for every id in IDS_FILE (the ids ``squeue`` prints,
refreshed by the test), again and again, from 8 threads; ``future``: announces the 60 ids
after the newest in IDS_FILE, again and again; ``idle``: holds as many connections as the
daemon lets it (CONNECTIONS at most, 400 unless given), each with half a message, opening a
new one whenever one is closed. Prints
what it sent as one JSON line at the end.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
import time
from collections import Counter


def connect(spec: str) -> socket.socket:
    kind, _, rest = spec.partition(":")
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        return socket.create_connection((host.strip("[]"), int(port)), timeout=2)
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(2)
    sock.connect(rest if kind == "unix" else spec)
    return sock


def message(job_id: int, cluster: str, context: str) -> bytes:
    return json.dumps({"SLURM_JOB_ID": str(job_id), "SLURM_SCRIPT_CONTEXT": context,
                       "SLURM_CLUSTER_NAME": cluster}).encode()


def send(spec: str, data: bytes, sent: Counter) -> None:
    try:
        with connect(spec) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            sent["answered" if sock.recv(16) else "closed"] += 1
    except OSError:
        sent["refused"] += 1


def ids(path: str) -> list[int]:
    try:
        with open(path) as f:
            return [int(w) for w in f.read().split()]
    except (OSError, ValueError):
        return []


def replay(spec: str, cluster: str, path: str, until: float, sent: Counter) -> None:
    while time.monotonic() < until:
        for job_id in ids(path) or [1]:
            for context in ("prolog_slurmctld", "epilog_slurmctld"):
                send(spec, message(job_id, cluster, context), sent)
            if time.monotonic() >= until:
                return


def future(spec: str, cluster: str, path: str, until: float, sent: Counter) -> None:
    while time.monotonic() < until:
        newest = max(ids(path), default=0)
        for job_id in range(newest + 1, newest + 61):
            send(spec, message(job_id, cluster, "prolog_slurmctld"), sent)


REPEATED = [3_000_000_001 + i for i in range(5)]  # unknown ids sent again and again


def flood(spec: str, cluster: str, path: str, until: float, sent: Counter) -> None:
    rng = random.Random(threading.get_ident())
    while time.monotonic() < until:
        kind = rng.choice(["unknown", "unknown", "repeated", "garbage", "large", "half"])
        try:
            with connect(spec) as sock:
                if kind == "unknown":
                    sock.sendall(message(rng.randrange(10**8, 4 * 10**9), cluster,
                                         rng.choice(["prolog_slurmctld", "epilog_slurmctld"])))
                elif kind == "repeated":
                    sock.sendall(message(rng.choice(REPEATED), cluster, "prolog_slurmctld"))
                elif kind == "garbage":
                    sock.sendall(rng.randbytes(rng.randrange(1, 2000)))
                elif kind == "large":
                    sock.sendall(b'{"SLURM_JOB_ID": "' + b"9" * 200_000)
                else:  # half-sent, never finished: the server gives it a second
                    sock.sendall(b'{"SLURM_JOB_ID": "12')
                    time.sleep(1.2)
                sock.shutdown(socket.SHUT_WR)
                sock.recv(16)
            sent[kind] += 1
        except OSError:  # reset by the server (a large message), or refused under load
            sent[f"{kind} (connection reset)"] += 1


def idle(spec: str, until: float, sent: Counter, most: int = 400) -> None:
    held: list[socket.socket] = []
    while time.monotonic() < until:
        for sock in list(held):
            try:
                sock.setblocking(False)
                if sock.recv(1) == b"":
                    raise OSError
            except BlockingIOError:
                continue
            except OSError:
                held.remove(sock)
                sock.close()
        while len(held) < most:
            try:
                sock = connect(spec)
                sock.sendall(b'{"SLURM_JOB_ID": "')
            except OSError:
                sent["refused"] += 1
                break
            held.append(sock)
            sent["opened"] += 1
        sent["most held"] = max(sent["most held"], len(held))
        time.sleep(0.02)


def main(argv: list[str]) -> None:
    attack, spec, cluster, path, seconds, *most = argv
    until = time.monotonic() + float(seconds)
    sent: Counter = Counter()
    if attack == "idle":
        idle(spec, until, sent, *(int(n) for n in most))
    else:
        work = {"replay": replay, "future": future, "flood": flood}[attack]
        threads = [threading.Thread(target=work, args=(spec, cluster, path, until, sent))
                   for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(json.dumps(dict(sent)))


if __name__ == "__main__":
    main(sys.argv[1:])
