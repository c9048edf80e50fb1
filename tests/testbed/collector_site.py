"""ClusterCockpit's cc-metric-collector on a test bed node, configured as its documentation
configures one for cc-backend's metric store: the ``loadavg``, ``memstat`` and ``cpustat``
collectors, its router naming the node, its ``http`` sink posting line protocol to
``/api/write?cluster=`` with a JWT of the ``api`` role, in seconds (the store wants them).

The test bed's nodes share one host, so each node's collector reads the host's /proc and its
router names the node (``add_tags_if hostname``, which its own hostname tag yields to): the
samples are the host's, attributed to the node. What cc-backend is configured with
(tests/ccbackend_site.py ``cluster_json``) is what it sends: :data:`METRICS`. The standard
library only: the demo (tests/testbed/demo_site.py) runs without pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

# what the collector sends, as cc-backend's metricConfig names it: the load average of the
# last minute (loadavg's load_one), the memory in use in GB (memstat's mem_used, kB at the
# source), and the user time of each hwthread in percent (cpustat, per type-id)
METRICS = ("cpu_load", "mem_used", "cpu_user")
INTERVAL_S = 10  # the metricConfig timestep of METRICS


def write_config(directory: Path, hostname: str, url: str, cluster: str, token: str) -> Path:
    """The collector's five files in ``directory``; returns the main one. The sinks file
    holds the JWT: only its owner reads it, from its first byte."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "collectors.json": {"loadavg": {}, "memstat": {}, "cpustat": {}},
        "receivers.json": {},
        "router.json": {
            "interval_timestamp": True,
            "process_messages": {
                # renaming comes after dropping in the message processor: the source names
                "drop_messages_if": ["!(name in ['load_one', 'mem_used', 'cpu_user'])"],
                "rename_messages": {"load_one": "cpu_load"},
                "change_unit_prefix": {"name == 'mem_used'": "G"},
                "add_tags_if": [{"key": "hostname", "value": hostname, "if": "true"}]}},
        "config.json": {
            "sinks-file": str(directory / "sinks.json"),
            "collectors-file": str(directory / "collectors.json"),
            "receivers-file": str(directory / "receivers.json"),
            "router-file": str(directory / "router.json"),
            "main": {"interval": f"{INTERVAL_S}s", "duration": "1s"}},
    }
    for name, doc in files.items():
        (directory / name).write_text(json.dumps(doc, indent=1))
    sinks = {"cc-backend": {"type": "http", "url": f"{url}/api/write?cluster={cluster}",
                            "jwt": token, "precision": "s", "flush_delay": "1s",
                            "timeout": "5s"}}
    fd = os.open(directory / "sinks.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(sinks, indent=1))
    return directory / "config.json"


def start(binary: str, config: Path) -> subprocess.Popen[bytes]:
    """The collector, detached, logging beside its config (``collector.log``)."""
    with (config.parent / "collector.log").open("a") as log:
        return subprocess.Popen([binary, "-config", str(config)], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)
