"""Benchmark results files: one JSON file per BENCHMARKS.md section under
``tests/bench/results/``, written by the benchmark that measured it, read by
:mod:`tests.bench.render` (the only source of the figures in BENCHMARKS.md).

Schema (``"schema": 1``)::

    {
      "schema": 1,
      "section": "pipeline",                      # the file's name without .json
      "command": ".venv/bin/python -m tests.bench.all --only pipeline",
      "date": "2026-11-23T10:30:00Z",             # when the measurement ended (UTC)
      "took_s": 412.5,                            # wall time of the measurement
      "receiver": "cc-backend 1.5.4",             # what the daemon delivered to (RECEIVERS)
      "machine": {"cpu": "AMD EPYC", "cores": 2, "ram_gb": 23.5,
                  "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0",
                  "python": "3.11.7", "commit": "45ed901", "dirty": false},
      "plan": {...},                              # the parameters the run was given
      "data": {...}                               # raw measurements, one entry per run
    }

``dirty`` says that ``ccadapter/`` or ``tests/`` differed from the commit when it ran.
``receiver`` names what the measured daemon delivered to: the real cc-backend (its release),
the stand-in (tests/standin), a nats-server alone, or nothing (a figure of Slurm, the parser
or the test suite): a stand-in's figure says nothing of cc-backend's speed or answers.
Files may sit beside their JSON (a plot, ``scale.png``); a renderer links them by name.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tests" / "bench" / "results"
SCHEMA = 1
# what a results file may name as its receiver (tests.ccbackend.RECEIVER is the first)
RECEIVERS = ("cc-backend 1.5.4", "stand-in", "nats-server", "none")


def machine() -> dict[str, Any]:
    """The machine and checkout a measurement ran on."""
    commit = _git("rev-parse", "--short", "HEAD")
    # results files are the output, not the code that measured
    dirty = bool(_git("status", "--porcelain", "--", "ccadapter", "tests",
                      ":(exclude)tests/bench/results"))
    return {"cpu": _cpu_model(), "cores": os.cpu_count() or 0, "ram_gb": _ram_gb(),
            "os": _os_name(), "kernel": platform.release(),
            "python": platform.python_version(), "commit": commit, "dirty": dirty}


def command_line(module: str, argv: list[str] | None = None, *, lock: bool = False) -> str:
    """How this run was started, for the reader to repeat: ``python -m MODULE ARGS``."""
    args = sys.argv[1:] if argv is None else argv
    cmd = " ".join([".venv/bin/python -m", module, *map(shlex.quote, args)])
    return f"flock /tmp/ccadapter-integration.lock {cmd}" if lock else cmd


def write(section: str, *, command: str, receiver: str, plan: dict[str, Any],
          data: dict[str, Any], took_s: float, directory: Path | None = None,
          when: float | None = None, machine_info: dict[str, Any] | None = None) -> Path:
    """Store one section's measurements (the whole file is replaced). ``receiver``: one of
    :data:`RECEIVERS`. ``machine_info`` corrects what :func:`machine` finds (e.g. the
    commit a CI log was made on)."""
    if receiver not in RECEIVERS:
        raise ValueError(f"receiver {receiver!r} is none of {', '.join(RECEIVERS)}")
    doc = {"schema": SCHEMA, "section": section, "command": command,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
           "took_s": round(took_s, 1), "receiver": receiver,
           "machine": {**machine(), **(machine_info or {})}, "plan": plan, "data": data}
    directory = directory or RESULTS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{section}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


def load(section: str, directory: Path | None = None) -> dict[str, Any] | None:
    """A section's results, or None when it was never measured."""
    path = (directory or RESULTS) / f"{section}.json"
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    if doc.get("schema") != SCHEMA or doc.get("section") != section:
        raise ValueError(f"{path}: not a schema-{SCHEMA} results file of {section!r}")
    if doc.get("receiver") not in RECEIVERS:
        raise ValueError(f"{path}: names no receiver of {', '.join(RECEIVERS)}")
    return doc


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          check=False).stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()
