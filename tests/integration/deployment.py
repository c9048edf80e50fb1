"""The deployment profile of the test bed (tests/testbed/deploy) for the systemd tests: the
container, ccadapter installed in it by the README's own commands, the unit, its journal."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.workload import Cluster

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "tests" / "testbed" / "deploy"
UNIT = "ccadapter"
CONFIG = "/etc/cc-slurm-adapter/config.json"


def deploy(*args: str, timeout: float = 600, check: bool = True) -> str:
    proc = subprocess.run([str(DEPLOY), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"tests/testbed/deploy {' '.join(args)}: rc={proc.returncode}\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return proc.stdout


@dataclass
class Container:
    """The booted container, its cluster, and ccadapter's unit in it."""

    cluster: Cluster
    root: Path

    @classmethod
    def up(cls) -> Container:
        deploy("up", timeout=900)
        info = json.loads(deploy("info"))
        cluster = Cluster(info["cluster"], "22.05", (str(DEPLOY), "run"), (info["name"],),
                          info["name"], slurm_conf=info["slurm_conf"])
        return cls(cluster, Path(info["root"]))

    def run(self, *argv: str, check: bool = True, timeout: float = 120) -> str:
        return self.cluster.run(*argv, check=check, timeout=timeout)

    def show(self, *props: str) -> dict[str, str]:
        """``systemctl show ccadapter`` properties."""
        out = self.run("systemctl", "show", UNIT, *(f"--property={p}" for p in props))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def main_pid(self) -> int:
        return int(self.show("MainPID")["MainPID"])

    def journal(self, since: str = "") -> list[str]:
        """The unit's journal lines (messages only) since boot or ``since``."""
        args = ["journalctl", "-u", UNIT, "--no-pager", "-o", "cat"]
        args += ["--since", since] if since else ["-b"]
        return self.run(*args).splitlines()

    def wait_active(self, timeout: float = 180) -> None:
        until = time.time() + timeout
        while self.show("ActiveState")["ActiveState"] != "active":
            if time.time() > until:
                state = self.show("ActiveState", "SubState", "Result")
                raise TimeoutError(f"{UNIT} not active: {state}\n"
                                   + "\n".join(self.journal()[-30:]))
            time.sleep(1)

    def now(self) -> str:
        """The container's clock, as journalctl --since takes it."""
        return self.run("date", "+%Y-%m-%d %H:%M:%S").strip()


def install(container: Container, site: Path, cc_url: str, token: str) -> None:
    """A site's checkout in ``site`` (the wheels of ccadapter and what it needs, config.json
    with the JWT in a file of its own, the hook and the unit), then the README's install
    block run in the container, as an administrator would."""
    dist = site / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "-w", str(dist),
                            str(REPO)], capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL, check=False)
    if built.returncode != 0:
        raise RuntimeError(f"pip wheel failed: {built.stderr[-3000:]}")
    (site / "config.json").write_text(json.dumps({
        "ccRestUrl": cc_url, "ccRestJwtFile": "/etc/cc-slurm-adapter/jwt",
        "slurmPollInterval": 60}, indent=1))
    (site / "jwt").write_text(token + "\n")
    for part in ("hooks", "systemd"):
        shutil.copytree(REPO / part, site / part, dirs_exist_ok=True)
    deploy("uninstall")  # what an earlier run installed: each run installs afresh
    deploy("install", str(site), timeout=900)
