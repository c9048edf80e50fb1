"""Recorded sacct records made to carry consumed energy: constructed, not recorded.

The test bed has no energy plugin (``AcctGatherEnergyType`` is unset), so none of its
recordings carries consumed energy. Every recorded job record has the ``energy`` TRES in
its ``tres.allocated`` all the same, unset: ``{"type": "energy", "name": null, "id": 3,
"count": null}`` on 22.05, ``{"type": "energy", "name": "", "id": 3, "count": -2}`` on 24.11
and 26.05. :func:`with_energy` takes such a real recorded document and gives that entry a
count, the only thing a cluster with an energy plugin writes differently there: the joules
slurmctld summed over the job's steps (see ``ccadapter.slurm.formats.values.
consumed_energy``). Layout as each version's parser writes it: 22.05
src/plugins/openapi/dbv0.0.38/parse.c:359 and :432-439 (schema ``dbv0.0.38_tres_list`` of
its openapi.json: ``count`` an integer), 24.11 src/plugins/data_parser/v0.0.42/parsers.c:7006
and :7137-7145, 26.05 data_parser/v0.0.45 parsers.c:9062 and :9287-9295 (``count`` an
int64).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

UNSET = {"22.05": None, "24.11": -2, "26.05": -2}  # how each version writes NO_VAL64


def with_energy(doc: Mapping[str, Any], joules: Mapping[int, int]) -> dict[str, Any]:
    """A copy of a recorded ``sacct --json`` document whose job ``id`` records carry
    ``joules[id]`` consumed energy. Fails if a record's energy entry is not the recorded
    unset one, so a change of the recordings cannot go unnoticed."""
    out = copy.deepcopy(dict(doc))
    version = str(_version(out))
    seen = set()
    for record in out["jobs"]:
        if record["job_id"] not in joules:
            continue
        (entry,) = [t for t in record["tres"]["allocated"] if t["type"] == "energy"]
        assert entry["count"] == UNSET[version] and entry["id"] == 3, entry
        entry["count"] = joules[record["job_id"]]
        seen.add(record["job_id"])
    assert seen == set(joules), f"no record of {set(joules) - seen}"
    return out


def _version(doc: Mapping[str, Any]) -> str:
    meta = doc["meta"]
    ver = (meta.get("slurm") or meta["Slurm"])["version"]
    return f"{int(ver['major'])}.{int(ver['minor']):02d}"
