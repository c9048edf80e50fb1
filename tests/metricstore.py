"""cc-backend 1.5.4's built-in metric store, fed and read as its collectors and job pages do.

Writes go to ``POST /api/write?cluster=`` as line protocol (pkg/metricstore/lineprotocol.go):
the measurement is the metric (one of the cluster.json's ``metricConfig``: others are
dropped without a word), the tags ``hostname``, ``type`` and ``type-id`` (``hwthread`` and
the OS id, ``accelerator`` and the topology's id), the field ``value``, the time in whole
seconds (a finer one is taken as "now"). Reads are ``GET /api/jobs/metrics/{id}``, what a
job page plots: cc-backend picks the series from the job's ``resources`` (its hwthreads, its
accelerators), and needs a reader that may see every user's jobs (admin).

Pitfalls this module keeps to (read in the source): a series without data shifts the ids of
those after it (the answer is labelled by position: write every id of a node), a buffer takes
samples in ascending time only, and a running job's answer is cached 2 minutes per metric
and scope list (read each once, after writing).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable
from typing import Any

from tests.ccbackend import CcBackend

TIMESTEP = 10  # the metricConfig timestep of the test metrics (tests/ccbackend_site.py)


def line(metric: str, host: str, kind: str, type_id: str, value: float, at: int) -> str:
    return f"{metric},hostname={host},type={kind},type-id={type_id} value={value} {at}"


def write(cc: CcBackend, cluster: str, lines: Iterable[str]) -> None:
    """One ``POST /api/write`` with the daemon's token (role api, as a collector's)."""
    body = "\n".join(lines).encode()
    req = urllib.request.Request(f"{cc.server_url}/api/write?cluster={cluster}", data=body,
                                 method="POST", headers={"X-Auth-Token": cc.token})
    with urllib.request.urlopen(req, timeout=60) as resp:
        if resp.status != 200:
            raise RuntimeError(f"POST /api/write: {resp.status} {resp.read()[:500]!r}")


def job_series(cc: CcBackend, db_id: int, metric: str, scope: str
               ) -> dict[tuple[str, str], list[float | None]]:
    """The job's series of ``metric`` at ``scope`` as its page gets them: (hostname, id)
    -> values. cc-backend answers an error with status 200 and ``data: null``."""
    doc: dict[str, Any] = cc._get(f"/api/jobs/metrics/{db_id}?metric={metric}&scope={scope}")
    if doc.get("error") or not doc.get("data"):
        raise RuntimeError(f"GET /api/jobs/metrics/{db_id}: {json.dumps(doc)[:1000]}")
    out: dict[tuple[str, str], list[float | None]] = {}
    for entry in doc["data"]["jobMetrics"] or []:
        if entry["name"] != metric:
            continue
        for series in entry["metric"]["series"] or []:
            key = (series["hostname"], str(series.get("id", "")))
            if key in out:
                raise AssertionError(f"job {db_id}: two series of {metric} for {key}")
            out[key] = series["data"]
    return out
