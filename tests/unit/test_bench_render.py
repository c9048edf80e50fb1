"""BENCHMARKS.md is written by code only: it is what tests/bench/render.py makes of the
committed results files; every registered section renders from its results alone; a missing
one says "not measured yet" with its command; the CI-duration reader and the all-in-one
command keep their promises."""

from __future__ import annotations

import copy
import json
import sys

import pytest

from tests.bench import all as bench_all
from tests.bench import (
    ci_time,
    render,
    render_burst,
    render_footprint,
    render_numbering,
    results,
)

MACHINE = {"cpu": "Test CPU", "cores": 2, "ram_gb": 23.5, "os": "Debian GNU/Linux 12",
           "kernel": "6.1.0", "python": "3.11.7", "commit": "c0ffee1", "dirty": False}


def doc(section: str, plan: dict, data: dict) -> dict:
    receiver = {"pipeline": "cc-backend 1.5.4", "faults": "cc-backend 1.5.4",
                "parse": "none", "ci": "none", "nats": "nats-server"}.get(section, "stand-in")
    return {"schema": results.SCHEMA, "section": section, "command": f"cmd-{section}",
            "date": "2026-11-23T10:30:00Z", "took_s": 600.0, "receiver": receiver,
            "machine": MACHINE, "plan": plan, "data": data}


def _run(jobs: int, drain_s: float, peak: float, ceiling: float = 1000.0) -> dict:
    held = {"stopped": jobs - 3, "running": 3, "cached": 0}
    trials = [{"threads": n, "jobs": 2000, "events_per_s": ceiling * (1 - 0.01 * n)}
              for n in (1, 2, 4, 8)]
    return {"receiver": "cc-backend 1.5.4", "jobs": jobs, "events": 2 * jobs,
            "enqueue_s": jobs / 1250, "jobs_per_s": 1250.0, "drain_s": drain_s,
            "events_per_s": 2 * jobs / drain_s, "cpu_enqueue_s": 7.0,
            "slurm_cpu_enqueue_s": 2.5, "cpu_drain_s": 20.0,
            "rss_end_mb": 61.0, "peak_rss_mb": peak, "rss_enqueue_mb": [50.0, peak],
            "rss_drain_mb": [55.0, 66.0],
            "outbox": {"start:delivered": jobs, "stop:delivered": jobs}, "held": held,
            "ceiling": {"jobs": jobs, "events": 2 * jobs, "threads": 1, "seconds": 1.0,
                        "events_per_s": ceiling, "held": held, "trials": trials},
            "ceiling_events_per_s": ceiling, "ratio": 2 * jobs / drain_s / ceiling,
            "parse": {"jobs": jobs, "jobs_per_s": 9000.0}, "parse_jobs_per_s": 9000.0}


def _level(queued: int, cpu_share: float, window_wall: float, squeue_wall: float) -> dict:
    rec = {"cycles": 10, "wall_median": window_wall, "wall_max": 2 * window_wall,
           "cpu_median": 0.05, "cpu_max": 0.1, "total_cpu_median": 0.07,
           "total_cpu_max": 0.12, "commands_median": 2, "bytes_median": 40e3,
           "bytes_max": 90e3, "slurm_wall_median": 0.75 * window_wall,
           "slurm_wall_max": 1.5 * window_wall, "own_wall_max": 0.5 * window_wall}
    lat = {"n": 3000, "p50": 0.12, "p95": 0.4, "max": 2.5}
    return {"queued": queued, "t0": 0.0, "t1": 600.0, "cpu_s": 600 * cpu_share,
            "cpu_share": cpu_share, "rss_samples_mb": [40.0, 41.0, 42.0], "rss_peak_mb": 55.0,
            "rss_steps": [{"at_s": 12.4, "from_mb": 41.0, "to_mb": 42.0,
                           "logged": ["cycle slurm-lookback", "3 x ccadapter.cc.delivery"]}],
            "reconcilers": {"slurm-window": rec, "nodestate": rec}, "cycle_summaries": 20,
            "latency": {"from_prolog": lat, "from_start_time": lat, "missing": 0},
            "anchor": {"sacct": {"argv": "sacct", "wall": 1.0, "cpu": 0.5, "bytes": 2e6,
                                 "rc": 0},
                       "squeue": {"argv": "squeue", "wall": squeue_wall, "cpu": 6.8,
                                  "bytes": 165e6, "rc": 0}}}


def scale_data() -> dict:
    return {"levels": [_level(0, 0.01, 0.2, 0.3), _level(50_000, 0.02, 0.3, 16.5)],
            "count": {"submitted": 9000, "ran": 8900, "never_listed": 0, "problems": 0,
                      "examples": [], "lost": 0, "duplicated": 0, "queued_submitted": 50000,
                      "queued_sent": 0, "daemon_exit": 0, "tracebacks": 0},
            "churn": [], "nodes": 128, "version": "22.05.8", "plot": "x/scale.png"}


def history_data() -> dict:
    return {"catch_up": {"jobs": 60000, "peak_rss_mb": 70.0, "progress_lines": 72,
                         "enqueue_s": 300.0, "drain_s": 120.0},
            "backfill": {"days": 30, "runs": 60000, "peak_rss_mb": 120.0, "seconds": 400.0,
                         "output_lines": 122}}


def _fault(name: str, seconds: float | None, jobs: int, wrong: int = 0) -> dict:
    return {"fault": name, "fault_s": seconds, "jobs": jobs, "lost": 0, "duplicated": 0,
            "wrong": wrong, "nats_lost": 0, "nats_duplicated": 0, "nats_wrong": 0,
            "resends": 3, "unverified": 0, "unaccounted": 0, "gpu_forgotten": 1,
            "problems": [f"job {i}: numAcc 0 != Slurm's 1" for i in range(wrong)]}


def regression_docs() -> dict[str, dict]:
    """Before/after documents of tests.bench.regression: the after side slower in one row."""
    def side(commit: str, slow: float) -> dict:
        run = {"jobs": 2000, "events_per_s": 500.0 / slow, "ceiling_events_per_s": 600.0,
               "ratio": 0.83 / slow, "jobs_per_s": 1500.0, "parse_jobs_per_s": 9000.0,
               "peak_rss_mb": 60.0}
        return {"commit": commit, "took_s": 300.0, "date": "2026-11-23T10:30:00Z", "plan": {},
                "small": run, "large": {**run, "jobs": 20000},
                "start_from_prolog_p50_s": 0.1 * slow, "end_from_epilog_p50_s": 0.1,
                "samples": 320, "unannounced": 0, "hook_s": 0.016, "bare_s": 0.013,
                "hook_ratio": 0.016 / 0.013,
                "levels": {"0": {"cpu_share": 0.01, "rss_peak_mb": 50.0,
                                 "start_from_prolog_p50_s": 0.09}},
                "lost": 0, "duplicated": 0, "ran": 400}

    out = {}
    for bench, slow in (("pipeline", 1.0), ("scale", 1.0), ("hook", 1.5)):
        name = f"regression-{bench}"
        out[name] = doc(name, {"benchmark": bench, "command": ["python", "-m", bench]},
                        {"before": side("aaaaaaa", 1.0), "after": side("bbbbbbb", slow)})
        if bench == "pipeline":
            out[name]["receiver"] = "cc-backend 1.5.4"
    return out


def life_data(days: int = 12) -> dict:
    return {"simulated_days": days, "jobs_submitted": 5000 * days, "runs": 5600 * days,
            "lost": 0, "duplicated": 0, "wrong": 0, "checked": 5000 * days,
            "exceptions": {"het component (one job in cc-backend)": 40},
            "read_from": "cc-backend's API (GET /api/jobs/)", "real_seconds": 1900,
            "plot": "life.png",
            "days": [{"day": d, "jobs_ended": 5500, "rss_mb": 50.0 + (d == 1), "fds": 20,
                      "threads": 30, "outbox_mb": 10.0 * min(d, 8), "cpu_s": 40.0,
                      "log_lines": 150 + 10 * (d % 3 == 0), "pending": 0,
                      "quiet": d % 2 == 1} for d in range(1, days + 1)],
            "incidents": [{"name": "none (baseline)", "day": 1.4, "did": "nothing",
                           "daemon_said": [], "recovery_s": 300, "recovered": True},
                          {"name": "JWT rotated", "day": 2.4, "did": "re-keyed",
                           "daemon_said": ["ERROR ccadapter: refused | token"],
                           "recovery_s": 420, "recovered": True},
                          {"name": "state disk full 10 min", "day": 4.4, "did": "filled",
                           "daemon_said": [], "recovery_s": None, "recovered": False,
                           "error": "OSError"}]}


def soak_data() -> dict:
    return {"finished": True, "hours": 2.0, "jobs": 4000, "submitted": 3600, "lost": 0,
            "duplicated": 0, "wrong": 0, "exit_code": 0, "token_in_log": False,
            "plot": "soak.png", "faults": [{"fault": "503", "at_min": 3.0, "seconds": 40.0}],
            "minutes": [{"minute": m, "rss_mb": 52.0, "fds": 48, "threads": 45,
                         "outbox_mb": 5.0, "cpu_s": m * 0.5, "log_lines": 10 + m,
                         "pending": 0, "fault": "503" if m == 3 else "", "submitted": 30 * m}
                        for m in range(1, 121)]}


def synthetic() -> dict[str, dict]:
    """One results document of each registered section (not measurements: test inputs)."""
    idle = {"calls": {"sacct": 1, "scontrol": 1, "squeue": 1}, "jobs": 0}
    busy = {"scripts": {"calls": {"sacct": 2, "scontrol": 2, "squeue": 1}, "jobs": 10},
            "no_scripts": {"calls": {"sacct": 1, "scontrol": 2, "squeue": 1}, "jobs": 10}}
    lat = {"start": [0.2] * 9 + [3.0], "end": [0.1] * 10, "start_slurm": [0.8] * 10,
           "end_slurm": [0.7] * 10, "start_prolog": [0.25] * 9 + [3.5],
           "end_epilog": [0.15] * 10, "unannounced": []}
    return {
        "parse": doc("parse", {"runs": 3, "jobs": 10_000, "quick": False},
                     {"rows": [{"version": "22.05", "size": 27e6, "times": [1.2, 1.3, 1.25]}]}),
        "pipeline": doc("pipeline", {"runs": 1, "small_jobs": 10_000, "large_jobs": 100_000,
                                     "workers": 16, "receiver": "cc-backend 1.5.4",
                                     "commit_interval": "2s", "ceiling_threads": [1, 2, 4, 8],
                                     "ceiling_sample_jobs": 2000, "chunk_jobs": 5000,
                                     "poll_s": 2, "quick": False},
                        {"small": [_run(10_000, 20.0, 70.0)],
                         "large": [_run(100_000, 250.0, 95.0)]}),
        "nats": doc("nats", {"runs": 2, "events": 5000, "workers": 16, "quick": True},
                    {"rates": {"core": [2000.0, 2100.0], "jetstream": [1800.0, 1700.0]}}),
        "cycles": doc("cycles", {"runs": 2, "tasks": 10, "quiet_wait_s": 130.0,
                                 "quick": False},
                      {"rows": [{"version": "24.11.5", "idle": [idle, idle],
                                 "busy": [busy]}]}),
        "memory": doc("memory", {"runs": 2, "poll": 2, "every_s": 4.0, "quick": False},
                      {"rows": [{"version": "24.11.5", "rss": [38.0, 38.5]}]}),
        "idle-cpu": doc("idle-cpu", {"runs": 1, "window": 120.0, "poll": 60,
                                     "quiet_cpu_s": 0.02, "quiet_span_s": 2.0, "quick": False},
                        {"runs": [[{"version": "24.11.5", "window": 120.2, "cpu_s": 0.6,
                                    "children_s": 0.3, "rss_mb": 40.0, "exit": 0}]]}),
        "hook": doc("hook", {"jobs": 10, "pairs": 50, "gap_s": 0.05, "poll": 60,
                             "quick": False},
                    {"rows": [{"version": "26.05.5", "lat": lat}], "wall_version": "22.05.8",
                     "hook_s": 0.016, "bare_s": 0.013}),
        "scale": doc("scale", {"sizes": [0, 50_000], "duration_s": 600.0, "warmup_s": 120.0,
                               "nodes": 128, "running": 500, "rate": 5.0, "poll": 60,
                               "cc_poll": 300, "commit_interval": 120, "anchor_runs": 3},
                     scale_data()),
        "scale-history": doc("scale-history", {"runs": 60000, "days": 30, "chunk_jobs": 5000,
                                               "lookback_days": 3}, history_data()),
        "faults": doc("faults", {"quiet_s": 15.0, "min_jobs": 200, "poll_s": 10,
                                 "faults": {"26.05": [["state disk full", 30]]},
                                 "quick": False},
                      {"rows": [{"version": "26.05.5", "cluster": "cluster26",
                                 "jobs_submitted": 230, "daemon_restarts": 20, "seconds": 700,
                                 "exit_code": 0, "traceback": False, "secret_logged": False,
                                 "faults": [_fault("normal", None, 40),
                                            _fault("state disk full", 30, 197, wrong=2)]}]}),
        **regression_docs(),
        "energy-archive": {**doc("energy-archive", {"bursts": "1,100", "poll_s": 0.2,
                                                    "limit_s": 900.0},
                                 {"runs": [{"burst": 1, "taken": 1, "answers": {"200": 1},
                                            "p50": 0.01, "p95": 0.01, "p99": 0.01,
                                            "max": 0.01},
                                           {"burst": 100, "taken": 100,
                                            "answers": {"200": 100, "500": 7}, "p50": 0.02,
                                            "p95": 0.3, "p99": 0.4, "max": 0.5}]}),
                           "receiver": "cc-backend 1.5.4"},
        "outbox-size": doc("outbox-size", {"days": 10, "per_day": 50_000,
                                           "script_bytes": 2000, "keep_s": 7 * 86400},
                           {"days": [{"day": d, "outbox_mb": 20.0 * min(d, 8) + d % 2,
                                      "events": 100_000 * min(d, 8)} for d in range(1, 11)]}),
        "life": doc("life", {"days": 12, "per_day": 5000, "factor": 1440.0, "commit": None,
                             "seed": 37, "first_incident": 2.4, "incident_every": 2.0},
                    life_data()),
        "life-commit": doc("life-commit", {"days": 12, "per_day": 5000, "factor": 1440.0,
                                           "commit": "1s", "seed": 37, "first_incident": 2.4,
                                           "incident_every": 2.0}, life_data()),
        "soak": doc("soak", {"hours": 2.0, "slurm": "22.05.8", "churn_interval_s": 2.0,
                             "seed": 37, "fault_chance_per_minute": 0.3,
                             "faults": ["503"], "commit_interval": "default"}, soak_data()),
        "side-by-side": doc("side-by-side", {"cluster": "cluster2505", "version": "25.05.8",
                                             "sizes": "0", "poll_s": 10}, side_by_side_data()),
        "numbering-side-by-side": doc("numbering-side-by-side", {
            "cluster": "cluster2505", "version": "25.05.8", "poll_s": 10}, numbering_data()),
        "burst": doc("burst", {"queued": 5000, "tasks": 2000, "cancel": 128, "rate": 20.0,
                               "steady": 60.0, "poll": 30}, burst_data()),
        "footprint": doc("footprint", {"runs": 50, "jobs": 10, "idle": 60.0,
                                       "cluster": "cluster2505"}, footprint_data()),
        "ci": doc("ci", {"run": ["tests/run"], "log": None},
                  {"total_s": 1800.0, "pytest_s": 1500.0, "passed": 560, "failed": 0,
                   "errors": 0, "skipped": 2, "xfailed": 11, "xpassed": 0, "deselected": 0,
                   "tests": 573, "returncode": 0, "source": "timed"}),
    }


def burst_data() -> dict:
    def leg(name: str, jobs: int, single: int, script: int) -> dict:
        return {"name": name, "jobs": jobs, "seconds": 60.0, "ctld_cpu_s": 3.0,
                "rpcs": {"REQUEST_SUBMIT_BATCH_JOB": 10, "REQUEST_JOB_INFO_SINGLE": single,
                         "REQUEST_BATCH_SCRIPT": script},
                "squeue_ms": {"n": 60, "p50": 20.0, "p99": 80.0},
                "sbatch_ms": {"n": 60, "p50": 30.0, "p99": 90.0},
                "start_s": {"p50": 0.2}, "stop_s": {"p50": 0.4}, "problems": []}
    return {"cluster": "clusterscale", "release": "22.05.8", "plan": {},
            "products": {"none": [leg("array", 100, 0, 0), leg("steady", 10, 0, 0)],
                         "ccadapter": [leg("array", 100, 100, 1), leg("steady", 10, 10, 10)]},
            "not_run": {"cc-slurm-adapter": "supports Slurm 24 and 25 only"}}


def footprint_data() -> dict:
    def call(name: str, cpu: float) -> dict:
        return {"name": name, "runs": 50, "cpu_ms": cpu, "wall_ms": cpu + 1}

    def rest(start: float, idle: float, rss: float) -> dict:
        return {"start_cpu_s": start, "idle_cpu_s": idle, "idle_s": 60.0, "rss": rss,
                "pss": rss - 10, "pss_anon": rss - 20}
    return {"release": "25.05.8",
            "hook": [call(render_footprint.BASH_HOOK, 2.0),
                     call(render_footprint.PYTHON_FLOOR, 8.0)],
            "prolog": {"Python hook alone": {"jobs": 10, "p50_ms": 30.0, "max_ms": 50.0},
                       render_footprint.BASH_HOOK: {"jobs": 0, "p50_ms": None,
                                                    "max_ms": None}},
            "daemon": {"ccadapter": rest(0.3, 0.2, 44.0),
                       "cc-slurm-adapter": rest(0.05, 0.3, 14.0)},
            "floor": {"bare interpreter": {"rss": 10.0, "pss": 5.0, "pss_anon": 4.0}},
            "imports": [{"package": "ccadapter", "ms": 60.0}]}


def test_the_footprint_compares_the_hook_with_an_interpreter_and_the_daemons():
    rows = render_footprint.sum_footprint(synthetic()["footprint"])
    assert rows[0][1:] == ["2.0 ms (0.25x of 8.0 ms)", "< 1x", "—", "✅"]
    assert rows[1][1:] == ["44.0 / 34.0 MB", "RSS ≤ 40 MB", "14.0 / 4.0 MB", "❌"]
    assert rows[2][1:] == ["0.50 s", "≤ cc-slurm-adapter's (0.35 s)", "0.35 s", "❌"]
    text = render_footprint.sec_footprint(synthetic()["footprint"])
    assert f"| {render_footprint.BASH_HOOK} | 10 | 30 ms |" not in text
    assert f"| {render_footprint.BASH_HOOK} | 0 | — | — |" in text
    assert "| ccadapter | 0.30 s | 0.20 s | 44.0 MB | 34.0 MB | 24.0 MB |" in text


def test_the_burst_counts_the_products_rpcs_over_the_no_daemon_leg():
    (row,) = render_burst.sum_burst(synthetic()["burst"])
    assert row[1:] == ["2.00 (steady)", "≤ 1", "—", "❌"]
    text = render_burst.sec_burst(synthetic()["burst"])
    assert "| array | ccadapter | 100 | 1.01 | 1.01 | 0 | 3.0 s | 20 ms / 80 ms |" in text
    assert "cc-slurm-adapter was not run: supports Slurm 24 and 25 only." in text


def numbering_data() -> dict:
    def side(hw: list[int], right: bool) -> dict:
        return {"hwthreads": {"t4": hw}, "accelerators": {}, "held_right": right,
                "series": [f"t4:{i}" for i in hw], "gpu_series": [], "series_right": right}
    return {"jobs": [{"name": "thread", "job": 7, "slurm": {"t4": [0, 1]},
                      "expected": {"t4": [0, 8]}, "expected_gpus": {},
                      "ccadapter": side([0, 8], True), "cc-slurm-adapter": side([0], False)}]}


def test_the_numbering_side_by_side_counts_each_products_right_jobs():
    rows = {r[0]: r for r in render_numbering.sum_numbering(synthetic()["numbering-side-by-side"])}
    held = rows["SMT nodes: jobs held with the OS ids and GPU ids of their allocation"]
    assert held[1:] == ["1 of 1", "all", "0 of 1", "✅"]
    text = render_numbering.sec_numbering(synthetic()["numbering-side-by-side"])
    assert "| thread (7) | t4: 0,1 | t4: 0,8 | t4: 0,8 ✅ | ✅ | t4: 0 ❌ | ❌ |" in text


def side_by_side_data() -> dict:
    def side(cpu: float, wrong: int, rss: float, p50: float | None, rpcs: int) -> dict:
        return {"runs": 14, "wrong_runs": wrong, "problems": [
            "job 7: numHwthreads 1 != Slurm's 3"] * wrong, "requeued_first_run": "preempted",
            "cpu_start": 0.3, "cpu_self": cpu / 2, "cpu_children": cpu / 2,
            "rss_peak_mb": rss + 1, "rss_mb": rss, "start_p50": p50, "start_p95": p50,
            "stop_p50": p50, "stop_p95": p50, "ctld_rpcs": {"REQUEST_JOB_INFO": rpcs},
            "dbd_rpcs": {"DBD_GET_JOBS_COND": rpcs}, "minutes": 2.0}
    return {"runs": [{"queued": 2000, "hook": True, "none": side(0, 0, 0, None, 100),
                      "ccadapter": side(0.8, 0, 38.0, 0.05, 140),
                      "cc-slurm-adapter": side(1.0, 2, 13.0, 1.08, 300)}]}


def test_benchmarks_md_is_what_the_committed_results_render_to():
    expected = render.document(render.load_all())
    actual = render.OUT.read_text()
    assert actual == expected, (
        "BENCHMARKS.md differs from what tests/bench/results/ renders to: run "
        "`python -m tests.bench.render` (and commit the results files it read)")


def test_committed_results_files_carry_command_date_and_machine():
    for sec in render.SECTIONS:
        found = results.load(sec.name)
        if found is None:
            continue
        assert found["command"].strip() and found["date"].endswith("Z")
        assert set(found["machine"]) == set(MACHINE)
        assert found["machine"]["commit"] and found["machine"]["cores"] > 0
    names = {p.stem for p in results.RESULTS.glob("*.json")}
    assert names <= {s.name for s in render.SECTIONS}, "a results file no section renders"


def test_every_section_has_a_synthetic_document_here():
    assert set(synthetic()) == {s.name for s in render.SECTIONS}


def test_every_figure_comes_from_the_results():
    text = render.document(synthetic())
    assert text.startswith("# Benchmarks")
    assert "not measured yet" not in text.lower()
    assert "cmd-pipeline" in text and "c0ffee1" in text and "Test CPU, 2 cores" in text
    assert "| 1,000 | 1,000 (1) | 1.00x |" in text  # 20,000 events / 20 s, of 1,000
    assert "800 vs 1,000 events/s = 0.80x | >= 0.8x the ceiling | — | cc-backend 1.5.4 | yes" \
        in text  # 200,000 / 250 s
    assert "95 MB (draining: 66 MB)" in text and "**no**" in text  # peak over its target
    assert "1,250 jobs/s (parse alone: 9,000 jobs/s) | >= 1,000 jobs/s" in text
    assert "Receiver: **cc-backend 1.5.4**" in text and "| nats-server |" in text
    assert "held 99,997 jobs stopped and 3 running" in " ".join(text.split())
    assert "0.50 %" in text  # 0.6 CPU s over 120.2 s
    assert "1.23x" in text  # hook 16 ms / bare 13 ms
    assert "**120 s**" in text
    assert "3 (sacct 1, scontrol 1, squeue 1; 0 jobs in the window)" in text
    assert "**30.0 min**" in text and "573 tests" in text  # CI
    # side by side: 0.8 s against 1.0 s; (140 - 100) / 2 min added against (300 - 100) / 2
    assert "| 2,000 queued, hook | ccadapter | 0 of 14 | preempted | 0.80 s (0.40 + 0.40)" \
        in text
    assert "| 70 | 70 |" in text and "| 50 | 50 |" in text  # 140 and 100 RPCs in 2 min
    assert "0.80x | ≤ 1x" in text and "`numHwthreads N`" in text
    assert "A `--quick` run" in text  # nats was one
    assert "130 s at most" in text and "every 4 s" in text and "50 ms apart" in text
    assert "| 26.05.5 | start | 0.25 s / 3.50 s / 3.50 s | 0.80 s / 0.80 s / 0.80 s |" in text
    assert "2.00x" in text  # scale: daemon CPU at 50,000 / at 0 queued, over 1.5
    assert "| 50,000 | slurm-window | 10 | 0.300 (0.600) s | 0.225 (0.450) s |" in text
    assert "longest cycle less its wait for Slurm's commands, 50,000 queued | 0.15 s" in text
    assert "| 50,000 | 12 | 41.0 -> 42.0 MB | cycle slurm-lookback, 3 x ccadapter.cc.delivery |" \
        in text
    assert "| 50,000 | 1.00 s / 0.50 s / 2.00 MB | 16.50 s / 6.80 s / 165.00 MB |" in text
    assert "120 MB | <= 100 MB | — | stand-in | **no** |" in text  # the backfill's peak
    assert "| 26.05.5 | state disk full (30 s) | 197 | 0 | 0 | 2 | 0 | 0 | 0 | 0 | 1 | 3 |" \
        in text
    assert "| **all** | | **237** | **0** | **0** | **2** | **0** | **0** | **0** | **0** | " \
        "**2** | |" in text
    assert "0 / 0 / 2; NATS 0 / 0 / 0 (of 237 jobs)" in text
    assert "26.05.5, state disk full: job 1: numAcc 0 != Slurm's 1" in text
    # before/after (issue 31): the hook's start latency 1.5x slower is beyond noise
    assert "| start, PrologSlurmctld to cc-backend (p50) | 0.100 s | 0.150 s | 1.50x | **no** |" \
        in text
    assert "| 2,000 jobs: events/s into cc-backend | 500 | 500 | 1.00x | yes |" in text
    assert "hook: figures beyond noise, bbbbbbb against aaaaaaa (issue 31) | 1 | 0 | — | " \
        "stand-in | **no** |" in text
    assert "before 400 ran, 0 lost, 0 duplicated" in text
    assert "**161 MB at 50,000 jobs/day**" in text and "| 9 | 161.0 MB | 800,000 |" in text
    assert "161 MB at most from day 9 (+1%" in text


def test_numbers_change_with_the_results():
    base = synthetic()
    changed = copy.deepcopy(base)
    changed["pipeline"]["data"]["small"][0].update(events_per_s=2000.0, ratio=2.0)
    changed["ci"]["data"]["total_s"] = 3600.0
    a, b = render.document(base), render.document(changed)
    row = "| 20.0 s | 2,000 | 1,000 (1) | 2.00x |"
    assert row in b and row not in a
    assert "60.0 min" in b and "| **no** |" in b.split("## Sync engine")[0]


def test_missing_sections_say_not_measured_yet_with_their_command():
    docs = synthetic()
    del docs["hook"], docs["ci"]
    text = render.document(docs)
    hook = next(s for s in render.SECTIONS if s.name == "hook")
    assert f"## {hook.title}\n\nNot measured yet. Produce it with:\n\n    {hook.command}" in text
    assert "| CI duration (issue 13) | not measured yet |  |  |  | — |" in text
    assert "flock /tmp/ccadapter-integration.lock" in hook.command


def test_ci_log_without_total_renders_pytest_time():
    docs = synthetic()
    docs["ci"]["data"].update(total_s=None, source="log", returncode=None)
    text = " ".join(render.document(docs).split())
    assert "pytest part of `tests/run`" in text and "25.0 min" in text
    assert "was not recorded" in text and "exit code unknown" in text


def test_check_mode(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    out = tmp_path / "B.md"
    assert render.main(["--out", str(out)]) == 0
    assert "Not measured yet" in out.read_text()
    assert render.main(["--check", "--out", str(out)]) == 0
    out.write_text(out.read_text() + "typed by hand\n")
    assert render.main(["--check", "--out", str(out)]) == 1


def test_results_round_trip_and_refuse_foreign_files(tmp_path):
    path = results.write("parse", command="c", receiver="none", plan={"runs": 1},
                         data={"rows": []}, took_s=1.25, directory=tmp_path,
                         machine_info={"commit": "abc"})
    loaded = results.load("parse", tmp_path)
    assert loaded["machine"]["commit"] == "abc" and loaded["took_s"] == 1.2
    assert loaded["receiver"] == "none"
    assert set(loaded["machine"]) == set(MACHINE)
    assert results.load("hook", tmp_path) is None
    path.write_text(json.dumps({**loaded, "section": "hook"}))
    with pytest.raises(ValueError, match="not a schema-1 results file"):
        results.load("parse", tmp_path)
    path.write_text(json.dumps({k: v for k, v in loaded.items() if k != "receiver"}))
    with pytest.raises(ValueError, match="names no receiver"):
        results.load("parse", tmp_path)
    with pytest.raises(ValueError, match="receiver 'nobody' is none of"):
        results.write("parse", command="c", receiver="nobody", plan={}, data={}, took_s=1,
                      directory=tmp_path)


def test_every_committed_results_file_names_its_receiver():
    """Issue 30: a figure of the stand-in says nothing of cc-backend; each file says which."""
    for path in sorted(results.RESULTS.glob("*.json")):
        doc = json.loads(path.read_text())
        assert doc.get("receiver") in results.RECEIVERS, path.name
    faults = results.load("faults")
    for row in faults["data"]["rows"]:
        for fault in row["faults"]:
            assert {"lost", "duplicated", "wrong"} <= set(fault), (row["version"], fault)


def test_a_failed_section_keeps_its_previous_results(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(render, "OUT", tmp_path / "B.md")
    results.write("parse", command="old", receiver="none",
                  plan={"runs": 1, "jobs": 1, "quick": False},
                  data={"rows": [{"version": "22.05", "size": 1, "times": [1.0]}]},
                  took_s=1)

    def broken(plan, clusters):
        raise RuntimeError("measurement broke")

    def fine(plan, clusters):
        return {"runs": plan.runs, "events": 10, "workers": 1, "quick": plan.quick}, {
            "rates": {"core": [1.0], "jetstream": [1.0]}}

    monkeypatch.setitem(bench_all.MEASURES, "parse", broken)
    monkeypatch.setitem(bench_all.MEASURES, "nats", fine)
    assert bench_all.main(["--only", "parse,nats", "--runs", "1"]) == 1
    assert results.load("parse")["command"] == "old"
    nats = results.load("nats")
    assert nats["command"] == ".venv/bin/python -m tests.bench.all --only parse,nats --runs 1"
    assert "## NATS publish rate" in (tmp_path / "B.md").read_text()


@pytest.mark.parametrize(("line", "want"), [
    ("======= 568 passed in 1292.37s (0:21:32) =======",
     {"passed": 568, "tests": 568, "pytest_s": 1292.37}),
    ("== 1 failed, 553 passed, 55 deselected, 11 xfailed, 2 warnings in 155.77s (0:02:35) ==",
     {"failed": 1, "passed": 553, "deselected": 55, "xfailed": 11, "tests": 565}),
    ("=== 3 passed, 1 error in 2.50s ===", {"errors": 1, "tests": 4}),
])
def test_ci_summary_line(line, want):
    found = ci_time.parse_summary(f"collected\n{line}\nafter\n")
    assert {k: found[k] for k in want} == want


def test_ci_summary_of_two_sessions_side_by_side():
    """tests/run: the main session and the deployment suite, each deselecting the other's."""
    log = ("== 1613 passed, 8 deselected in 2019.40s (0:33:39) ==\n"
           "==== the deployment suite (marker deploy), run beside the rest ====\n"
           "== 1 failed, 7 passed, 1613 deselected in 634.30s (0:10:34) ==\n")
    found = ci_time.parse_summary(log)
    assert {k: found[k] for k in ("passed", "failed", "tests", "deselected", "sessions",
                                  "pytest_s")} == {
        "passed": 1620, "failed": 1, "tests": 1621, "deselected": 0, "sessions": 2,
        "pytest_s": 2019.40}


def test_ci_log_without_summary_is_an_error():
    with pytest.raises(ValueError, match="no pytest summary"):
        ci_time.parse_summary("tests/run: test bed not up\n")


def test_ci_time_times_a_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(render, "OUT", tmp_path / "B.md")
    script = "import sys, time; time.sleep(0.2); print('== 2 passed in 0.10s =='); sys.exit(3)"
    assert ci_time.main(["--", sys.executable, "-c", script]) == 3
    ci = results.load("ci")
    assert ci["data"]["tests"] == 2 and ci["data"]["returncode"] == 3
    assert ci["data"]["total_s"] >= 0.2 and ci["data"]["source"] == "timed"
    assert "2 passed" in capsys.readouterr().out  # passed through
    assert "exit code 3" in (tmp_path / "B.md").read_text()


def test_side_by_side_says_which_sizes_ran_and_at_which_commit():
    from tests.bench.render_side_by_side import _sizes
    runs = [{"queued": 0, "commit": "aaaaaaa"}, {"queued": 0, "commit": "aaaaaaa"},
            {"queued": 50_000, "commit": "bbbbbbb"}]
    text = _sizes({"sizes": "0,2000,50000"}, runs)
    assert text.startswith("Queue sizes measured: 0, 50,000 (asked: 0, 2,000, 50,000; not "
                           "measured: 2,000)")
    assert "0 queued at aaaaaaa; 50,000 queued at bbbbbbb" in text
