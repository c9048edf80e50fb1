"""Everything the commands print as a table for a terminal: ``status``, ``queue list`` and
``jobs --format table``. JSON output is the same data, unformatted."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ccadapter.model import Job
from ccadapter.outbox import DeliveryStatus


def aligned(rows: Sequence[Sequence[str]]) -> str:
    """Rows (the first one the head) in left-aligned columns two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def render_table(doc: dict[str, Any]) -> str:
    """The status for a terminal: one section per concern, ages in words."""
    lines = [f"ccadapter {doc['version']}", ""]
    lines += _daemon_lines(doc["daemon"])
    last = doc["lastRun"]
    lines.append(f"lastRun     {_ago(last['age'])}  ({last['path']})")
    if control := doc.get("control"):
        lines.append(_control_line(control, doc["time"]))
    if hook := doc.get("hook"):
        lines.append(_hook_line(hook))
    lines += [f"numbering   {n['cluster']}/{n['subcluster']}: sent in Slurm's numbering "
              f"({n['reason']}: {n['detail']}; node {n['host']}, job {n['job']} first, "
              f"{n['starts']} start(s))" for n in doc.get("resourceNumbering") or []]
    lines += ["", *_outbox_lines(doc["outbox"])]
    lines += _unparsed_lines(doc.get("unparsedRecords"), doc["time"])
    lines += ["", "RECONCILER      LAST CYCLE   RESULT"]
    lines += _cycle_lines(doc["reconcilers"])
    if not doc["reconcilers"] and not doc.get("clusters"):
        lines.append("(no cycle recorded yet)")
    for name, cluster in doc.get("clusters", {}).items():
        served = {True: "served", False: "not served any more", None: "not yet served"}
        lines += ["", f"cluster {name}: {served[cluster['served']]}, lastRun "
                      f"{_ago(cluster['lastRun']['age'])}  ({cluster['lastRun']['path']})"]
        lines += _cycle_lines(cluster["reconcilers"]) or ["  (no cycle recorded yet)"]
        lines += _unparsed_lines(cluster.get("unparsedRecords"), doc["time"])
    return "\n".join(lines)


def _unparsed_lines(record: dict[str, Any] | None, now: float) -> list[str]:
    """Slurm records that could not be read, asked again every cycle."""
    if not record or not record["count"]:
        return []
    return [f"unreadable  {record['count']} Slurm record(s) asked again every cycle, the "
            f"first {_ago(now - record['since'])} ago; latest: {record['lastError']}"]


def _cycle_lines(cycles: dict[str, dict[str, Any]]) -> list[str]:
    return [f"{name:<15} {_ago(rec['age']):<12} "
            f"{'ok' if rec['ok'] else 'error: ' + str(rec['error'])}"
            for name, rec in sorted(cycles.items())]


def _daemon_lines(daemon: dict[str, Any]) -> list[str]:
    if daemon["pid"] is None:
        state = "no PID file"
    elif daemon["alive"]:
        state = f"PID {daemon['pid']} alive"
    else:
        state = f"stale PID file (PID {daemon['pid']} is gone)"
    if daemon["lockHeld"] is not None:
        owners = ", ".join(map(str, daemon["lockPids"]))
        state += f"; lock held by PID {owners}" if owners else "; lock free: not running"
    return [f"daemon      {state}  ({daemon['pidFile']})"]


def _hook_line(hook: dict[str, Any]) -> str:
    """``hook  1,204 received, dropped: invalid 3, unknown_job 12; unknown jobs: 40``."""
    dropped = ", ".join(f"{reason} {n:,}" for reason, n in hook["dropped"].items()) or "none"
    unknown = sum(hook["unknownJobs"].values())
    return (f"hook        {hook['received']:,} received, dropped: {dropped}; jobs slurmctld "
            f"did not show: {unknown:,}  (since the daemon started; recorded "
            f"{_ago(hook['age'])})")


def _control_line(control: dict[str, Any], now: float) -> str:
    holder = control["inControl"] or "none answers"
    line = (f"role        {control['role']} since {_ago(now - control['since'])}  (this host "
            f"{control['host']}; in control: {holder}; checked {_ago(control['age'])})")
    return line + (f"\n            error: {control['error']}" if control["error"] else "")


def _outbox_lines(box: dict[str, Any]) -> list[str]:
    if not box["exists"]:
        return [f"outbox      not created yet ({box['path']})"]
    oldest = f" (oldest {_ago(box['oldestPendingAge'])})" if box["pending"] else ""
    lines = [f"outbox      {box['pending']} pending{oldest}, {box['rejected']} rejected  "
             f"({box['path']})"]
    for kind, by_status in box["counts"].items():
        counts = ", ".join(f"{n} {status}" for status, n in sorted(by_status.items()))
        lines.append(f"  {kind:<10} {counts}")
    for ev in box["rejectedEvents"]:
        lines.append(f"  rejected #{ev['id']}: {ev['kind']} of job {ev['jobId']} "
                     f"({ev['cluster']}, start {ev['startTime']}): {ev['error']}")
    return lines


def _ago(age: float | None) -> str:
    if age is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if age >= size:
            return f"{age / size:.1f}{unit} ago"
    return f"{age:.0f}s ago"


def render_events(rows: list[dict[str, Any]], now: float) -> str:
    """``queue list`` for a terminal: one event a line, the error last (it is long)."""
    head = ("ID", "KIND", "STATUS", "CLUSTER", "JOBID", "START", "TRIES", "NEXT", "ERROR")
    table = [head]
    for r in rows:
        due = r["nextAttemptAt"] - now
        nxt = ("-" if r["status"] != DeliveryStatus.PENDING else "now" if due <= 0
               else f"in {due:.0f}s")
        table.append((str(r["id"]), r["kind"], r["status"], r["cluster"], str(r["jobId"]),
                      str(r["startTime"]), str(r["attempts"]), nxt, r["error"] or ""))
    return aligned(table)


def jobs_table(jobs_: list[Job], views: list[dict[str, Any]]) -> str:
    head = ("CLUSTER", "JOBID", "ARRAY", "STATE", "USER", "PROJECT", "PARTITION", "START",
            "END", "NODES", "HWT", "ACC", "SHARED", "SENT AS")
    rows = [head]
    for job, view in zip(jobs_, views, strict=True):
        array = f"{job.array_job_id}_{job.array_task_id}" if job.array_task_id is not None else ""
        sent = "ignored" if view["ignored"] else (
            "start+stop" if view["stopJob"] else "start" if view["startJob"] else "never started")
        if "editMeta" in view and not view["ignored"]:
            sent += "+energy"
        rows.append((
            job.cluster, str(job.job_id), array, job.state, job.user, job.account,
            job.partition, _ts(job.start_time), _ts(job.end_time),
            ",".join(job.hostnames) or "-", str(job.num_hwthreads), str(job.num_acc),
            job.shared.value, sent,
        ))
    return aligned(rows)


def _ts(epoch: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"
