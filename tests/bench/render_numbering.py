"""BENCHMARKS.md section of issue 45, part 5: what ccadapter and cc-slurm-adapter send as a
job's resources on SMT nodes, and what cc-backend's metric API answers for it
(tests/bench/numbering_side_by_side.py). Rendered by :mod:`tests.bench.render`."""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]
Row = list[str]
OURS, THEIRS = "ccadapter", "cc-slurm-adapter"


def _ids(by_host: dict[str, list]) -> str:
    return "; ".join(f"{h}: {','.join(map(str, v))}" for h, v in sorted(by_host.items())) or "—"


def _side(side: dict[str, Any]) -> str:
    if side.get("absent"):
        return "not held"
    text = _ids(side["hwthreads"])
    if side["accelerators"]:
        text += " GPU " + _ids(side["accelerators"])
    return text


def _mark(ok: bool) -> str:
    return "✅" if ok else "❌"


def _right(doc: Doc, product: str) -> tuple[int, int, int]:
    jobs = doc["data"]["jobs"]
    return (sum(j[product]["held_right"] for j in jobs),
            sum(j[product]["series_right"] for j in jobs), len(jobs))


def sum_numbering(doc: Doc) -> list[Row]:
    held, series, n = _right(doc, OURS)
    t_held, t_series, _ = _right(doc, THEIRS)
    return [
        ["SMT nodes: jobs held with the OS ids and GPU ids of their allocation",
         f"{held} of {n}", "all", f"{t_held} of {n}", _mark(held == n)],
        ["SMT nodes: jobs the metric API answers with exactly their own series",
         f"{series} of {n}", "all", f"{t_series} of {n}", _mark(series == n)],
    ]


def sec_numbering(doc: Doc) -> str:
    plan, jobs = doc["plan"], doc["data"]["jobs"]
    out = [f"Both products at once on Slurm {plan['version']} ({plan['cluster']}), each into its "
           "own real cc-backend 1.5.4 and its metric store, polling every "
           f"{plan['poll_s']} s with their own Prolog/Epilog clients. The jobs run on the test "
           "bed's SMT nodes (2 sockets x 4 cores x 2 threads; node 3 numbered as Linux does one "
           "socket after the other, with two GPUs named by PCI address, node 4 with interleaved "
           "sockets). *OS ids* are Slurm's `CPU_IDs` of `scontrol show job -d` in that "
           "numbering, computed by the benchmark; *series* says whether `GET "
           "/api/jobs/metrics/{id}` (scopes hwthread and accelerator, after samples naming "
           "their hwthread and GPU went to `POST /api/write`) answered exactly the job's own.",
           "",
           f"| job | Slurm CPU_IDs | OS ids | {OURS} held | series | {THEIRS} held | series |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for j in jobs:
        want = _ids(j["expected"]) + (f" GPU {_ids(j['expected_gpus'])}"
                                      if j["expected_gpus"] else "")
        out.append(f"| {j['name']} ({j['job']}) | {_ids(j['slurm'])} | {want} | "
                   f"{_side(j[OURS])} {_mark(j[OURS]['held_right'])} | "
                   f"{_mark(j[OURS]['series_right'])} | "
                   f"{_side(j[THEIRS])} {_mark(j[THEIRS]['held_right'])} | "
                   f"{_mark(j[THEIRS]['series_right'])} |")
    out += ["", "❌ under *held*: cc-backend holds other ids than the OS ids of the job's "
            "allocation; under *series*: its page plots other hwthreads' or GPUs' series than "
            "the job's own, or fewer."]
    return "\n".join(out) + "\n"
