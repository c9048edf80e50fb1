"""cc-slurm-adapter, the program ccadapter replaces, run as a site runs it, beside ccadapter.

Its binary is built by ``tests/testbed/predecessor build`` from the copied source. A site runs
``cc-slurm-adapter -daemon -config FILE`` under systemd with the Slurm commands on its PATH, and
its Prolog/Epilog client (the same binary without ``-daemon``) from slurmctld. Here both get the
cluster's Slurm environment (the ``env`` prefix of a source-built test-bed cluster: it serves
Slurm 24 and 25 only), and the client is put where the test bed's hook wrapper runs a second
hook beside ccadapter's (``hook_also`` of ``tests/testbed/slurm info``).

ccadapter is started the same way (:func:`start_ccadapter`): the same config file, unchanged,
and the Slurm commands found on PATH, not through ``slurmCommandPrefix``: what a site that
switches has.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.bench.delivery import cpu_seconds
from tests.integration.workload import Cluster

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "tests" / "testbed" / "predecessor"
HOOK_PY_DIR = REPO / "ccadapter" / "prep"


def binary() -> str:
    out = subprocess.run([str(BUILD), "path"], capture_output=True, text=True, timeout=30,
                         stdin=subprocess.DEVNULL, check=False)
    if out.returncode != 0:
        raise RuntimeError("cc-slurm-adapter is not built: run tests/testbed/predecessor build")
    return out.stdout.strip()


def slurm_env(cluster: Cluster) -> dict[str, str]:
    """The environment a site's daemon has on this cluster's controller host."""
    prefix = list(cluster.prefix)
    if prefix and prefix[0] != "env":
        raise ValueError(f"{cluster.name}: only a host cluster (env prefix) runs the predecessor")
    env = dict(os.environ)
    env.update(item.split("=", 1) for item in prefix[1:])
    return env


def site_config(cc_url: str, token: str, tmp: Path, *, poll: int = 10,
                listen: str | None = None) -> Path:
    """cc-slurm-adapter's config file with its own keys only (the README's example shape):
    both products read it unchanged. Mode 0600: it holds the JWT. ``listen``: where the
    daemon listens for its hook, if not on the socket its Prolog/Epilog client connects to."""
    run = tmp / "run"
    run.mkdir(parents=True, exist_ok=True)
    cfg = {
        "pidFilePath": str(run / "daemon.pid"),
        "prepSockListenPath": listen or str(run / "daemon.sock"),
        "prepSockConnectPath": str(run / "daemon.sock"),
        "lastRunPath": str(tmp / "lastrun"),
        "slurmPollInterval": poll, "slurmQueryDelay": 1,
        "ccPollInterval": 6 * poll,
        "ccRestUrl": cc_url, "ccRestJwt": token, "ccRestSubmitJobs": True,
    }
    path = tmp / "config.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(cfg, fh, indent=2)
    return path


@dataclass
class Usage:
    """What a daemon cost, read from /proc just before it is stopped: CPU seconds of the
    daemon and of the commands it ran and reaped (Slurm's clients), peak and current RSS."""
    cpu_self: float
    cpu_children: float
    rss_peak_mb: float
    rss_mb: float

    @property
    def cpu(self) -> float:
        return self.cpu_self + self.cpu_children


def usage(pid: int) -> Usage:
    own, children = cpu_seconds(pid)
    status = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return Usage(own, children, int(status["VmHWM"].split()[0]) / 1024,
                 int(status["VmRSS"].split()[0]) / 1024)


class Daemon:
    """One daemon process (either product) with its log; ``usage()`` while it runs."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.argv, self.env, self.log = argv, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> Daemon:
        with self.log.open("a") as fh:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=fh, stderr=fh,
                                         stdin=subprocess.DEVNULL)
        return self

    def usage(self) -> Usage:
        assert self.proc is not None
        return usage(self.proc.pid)

    def wait_log(self, text: str, timeout: float = 60) -> None:
        until = time.time() + timeout
        while text not in self.log.read_text(errors="replace"):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[0]} exited {self.proc.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-2000:]}")
            if time.time() > until:
                raise TimeoutError(f"{self.argv[0]}: no {text!r} in its log")
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, as ``systemctl stop`` sends."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(30)


def start_predecessor(cluster: Cluster, config: Path, log: Path) -> Daemon:
    """cc-slurm-adapter's daemon as its README's unit runs it (its default log level)."""
    daemon = Daemon([binary(), "-daemon", "-config", str(config)], slurm_env(cluster), log)
    return daemon.start()


def start_ccadapter(cluster: Cluster, config: Path, log: Path, *extra: str) -> Daemon:
    """ccadapter's daemon as a site's install runs it: its modules compiled to bytecode, as
    pip installs them (this checkout is installed editable, and the test bed's environment
    may say PYTHONDONTWRITEBYTECODE: compiling every module at each start would cost its
    start about 0.1 s of CPU a site never pays)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "ccadapter")],
                   check=True, stdin=subprocess.DEVNULL, timeout=300)
    env = slurm_env(cluster)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    daemon = Daemon([sys.executable, "-m", "ccadapter", "daemon", "--config", str(config),
                     *extra], env, log)
    return daemon.start()


def chain_hook(cluster: Cluster, program: str | None, config: Path | None = None) -> None:
    """Put a Prolog/Epilog client beside ccadapter's own hook on this cluster (``program``
    "cc-slurm-adapter" or "ccadapter", each with ``config``), or take it away (None). The
    test bed's wrapper runs it at the same moment as its own hook, from slurmctld."""
    if not cluster.hook_also:
        raise RuntimeError(f"{cluster.name}: the test bed names no hook_also")
    also = Path(cluster.hook_also)
    if program is None:
        also.unlink(missing_ok=True)
        return
    assert config is not None
    if program == "cc-slurm-adapter":
        line = f"exec {binary()} -config {config}"
    elif program == "ccadapter":
        line = (f"exec /usr/bin/python3 -I -S -c \"import sys; sys.path.insert(0, "
                f"'{HOOK_PY_DIR}'); import hook; sys.exit(hook.main())\" --config {config}")
    else:
        raise ValueError(program)
    tmp = also.with_suffix(".new")
    tmp.write_text(f"#!/bin/sh\n{line}\n")
    tmp.chmod(0o755)
    tmp.replace(also)
