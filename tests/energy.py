"""Recorded sacct records made to carry consumed energy: constructed, not recorded.

The test bed has no energy plugin (``AcctGatherEnergyType`` is unset), so none of its
recordings carries consumed energy. Every recorded job record has the ``energy`` TRES in
its ``tres.allocated`` all the same, unset: ``{"type": "energy", "name": null, "id": 3,
"count": null}`` on 22.05, ``{"type": "energy", "name": "", "id": 3, "count": -2}`` from 23.02
on (the recordings of every version say so: test_recorded_records_carry_unset_energy).
:func:`with_energy` takes such a real recorded document and gives that entry a count, the
only thing a cluster with an energy plugin writes differently there: the joules slurmctld
summed over the job's steps (see ``ccadapter.slurm.formats.values.consumed_energy``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# how each version writes NO_VAL64: null by 22.05's openapi/dbv0.0.38, -2 (the int64 of the
# same bits) by every data_parser since
UNSET = {"22.05": None, **dict.fromkeys(("23.02", "23.11", "24.05", "24.11", "25.05", "25.11",
                                         "26.05"), -2)}


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
