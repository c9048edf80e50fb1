"""BENCHMARKS.md sections of a long life (issue 37): the month-of-life runs
(tests/bench/life.py, ``life`` and ``life-commit``) and the real-time soak
(tests/bench/soak.py), with their plots (tests/bench/life_plot.py), which the benchmarks
write beside their results. No matplotlib here: the tests render BENCHMARKS.md with only the
``test`` extra installed.
"""

from __future__ import annotations

from typing import Any

from tests.bench.vitals import slope_per_week

Doc = dict[str, Any]
Row = list[str]
RSS_MB = 60  # the README's promise (issue 37)
QUIET_LOG_LINES = 200  # per quiet day at the default level
SLOPE_SHARE = 0.01  # of day 2's figure per week, after day 2
KEEP_DAYS = 7  # the outbox keeps rows this long (slurmQueryMaxSpan)


def _ok(good: bool) -> str:
    return "✅" if good else "❌"


def slopes(days: list[dict]) -> dict[str, float]:
    """RSS and fds slope per week after day 2, as a share of day 2's figure."""
    after = [d for d in days if d["day"] >= 2]
    out = {}
    for key in ("rss_mb", "fds"):
        base = after[0][key] if after else 0
        slope = slope_per_week([(d["day"], d[key]) for d in after])
        out[key] = slope / base if base else 0.0
    return out


def outbox_growth(days: list[dict], last: float) -> float:
    """Growth of the outbox file across the days after its retention, up to the ``last``
    day of submissions (after it the file shrinks), as a share of the least."""
    flat = [d["outbox_mb"] for d in days if KEEP_DAYS + 1 < d["day"] <= last]
    return (max(flat) - min(flat)) / min(flat) if flat and min(flat) else 0.0


def quiet_log_max(days: list[dict]) -> int:
    """Most lines the daemon logged on a quiet day (no incident; days 2 on: the first
    holds the start's lines)."""
    return max((d["log_lines"] for d in days if d["quiet"] and d["day"] >= 2), default=0)


def sum_life(doc: Doc) -> list[Row]:
    data, plan = doc["data"], doc["plan"]
    days = data["days"]
    s = slopes(days)
    rss = max(d["rss_mb"] for d in days)
    every = all(i["recovered"] for i in data["incidents"])
    commit = plan["commit"] or "default (2 min)"
    what = f"{data['simulated_days']} site days at {plan['per_day']:,} jobs/day, commit {commit}"
    return [
        [f"month of life ({what}): lost, duplicated, wrong",
         f"{data['lost']}, {data['duplicated']}, {data['wrong']} of {data['checked']:,} runs",
         "0, 0, 0", "—", _ok(data["lost"] == data["duplicated"] == data["wrong"] == 0)],
        [f"month of life ({what}): RSS, fds slope after day 2",
         f"{s['rss_mb']:+.1%}, {s['fds']:+.1%} of day 2 per week",
         f"within ±{SLOPE_SHARE:.0%}", "—",
         _ok(abs(s["rss_mb"]) <= SLOPE_SHARE and abs(s["fds"]) <= SLOPE_SHARE)],
        [f"month of life ({what}): peak RSS, most log lines on a quiet day",
         f"{rss:.1f} MB, {quiet_log_max(days)}", f"<= {RSS_MB} MB, <= {QUIET_LOG_LINES}", "—",
         _ok(rss <= RSS_MB and quiet_log_max(days) <= QUIET_LOG_LINES)],
        [f"month of life ({what}): incidents recovered from without a person",
         f"{sum(i['recovered'] for i in data['incidents'])} of {len(data['incidents'])}",
         "all", "—", _ok(every)],
    ]


def sec_life(doc: Doc) -> str:
    data, plan = doc["data"], doc["plan"]
    days = data["days"]
    s = slopes(days)
    commit = plan["commit"] or "cc-backend's default, 2 min of real time"
    ex = "; ".join(f"{n:,} {what}" for what, n in sorted(data["exceptions"].items()))
    out = [
        f"The daemon through {data['simulated_days']} days of a site's time (issue 37): "
        f"{data['jobs_submitted']:,} jobs submitted at {plan['per_day']:,} a day "
        f"({data['runs']:,} runs: short and long jobs, arrays, het jobs, requeues, timeouts, "
        "node failures, GPU jobs, cancelled queued jobs; 30 % of them through the "
        "Prolog/Epilog hook), delivered to the real cc-backend 1.5.4 (commit worker: "
        f"{commit}); the site clock ran {plan['factor']:.0f} times faster than real time "
        f"({data['real_seconds'] / 60:.0f} min). Real: the daemon's own command, config, "
        "outbox, state disk, hook socket, signals, and cc-backend; simulated: the clock and "
        "Slurm (22.05's recorded records and texts with this month's ids and times; "
        "tests/bench/life_slurm.py). An incident every two days, each at a fixed day.", "",
        f"**Lost {data['lost']}, duplicated {data['duplicated']}, wrong {data['wrong']}** "
        f"of {data['checked']:,} runs compared with Slurm's (state, duration, array id, "
        f"nodes), read from {data['read_from']}. Documented exceptions, counted apart: "
        f"{ex or 'none'}.", "",
        f"Slopes after day 2: RSS {s['rss_mb']:+.2%}, open fds {s['fds']:+.2%} of day 2's "
        f"per week (target ±{SLOPE_SHARE:.0%}); outbox file after its {KEEP_DAYS} days of "
        f"retention: {outbox_growth(days, plan['days']):+.1%} across those days (to day "
        f"{plan['days']:.0f}, the last of submissions). Peak RSS "
        f"{max(d['rss_mb'] for d in days):.1f} MB (target {RSS_MB}); most log lines on a "
        f"quiet day {quiet_log_max(days)} (target {QUIET_LOG_LINES}).", "",
    ]
    if data.get("plot"):
        out += [f"![RSS, fds, outbox and log lines per site day](tests/bench/results/"
                f"{data['plot']})", ""]
    out += ["| incident | day | what happened | what the daemon said | recovered after "
            "(site s) |", "| --- | --- | --- | --- | --- |"]
    for inc in data["incidents"]:
        said = inc["daemon_said"][0] if inc["daemon_said"] else "nothing above info"
        said = said.replace("|", "/")[:160]
        rec = f"{inc['recovery_s']:,}" if inc["recovered"] else \
            f"not recovered {inc.get('error', '')}"
        did = inc.get("did") or f"{inc.get('signal')} while catching up {inc.get('behind_s')} s"
        out.append(f"| {inc['name']} | {inc['day']} | {did.replace('|', '/')} | "
                   f"{said} | {rec} |")
    out += ["", "Recovered: the outbox empty again and lastRun past the moment the incident "
            "ended; the baseline row is the same wait with nothing done (one poll and the "
            "window's lag).", "",
            "| day | runs ended | RSS MB | fds | threads | outbox MB | CPU s | log lines | "
            "pending | quiet |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for d in days:
        out.append(f"| {d['day']} | {d['jobs_ended']:,} | {d['rss_mb']:.1f} | {d['fds']} | "
                   f"{d['threads']} | {d['outbox_mb']:.1f} | {d['cpu_s']:.1f} | "
                   f"{d['log_lines']} | {d['pending']} | {'yes' if d['quiet'] else ''} |")
    return "\n".join(out) + "\n"


def sum_soak(doc: Doc) -> list[Row]:
    data = doc["data"]
    if not data.get("finished"):
        return []
    mins = data["minutes"]
    rss = [m["rss_mb"] for m in mins]
    return [[f"real-time soak ({data['hours']} h, 22.05, proxy faults): lost, duplicated, "
             "wrong", f"{data['lost']}, {data['duplicated']}, {data['wrong']} of "
             f"{data['jobs']:,} runs", "0, 0, 0", "—",
             _ok(data["lost"] == data["duplicated"] == data["wrong"] == 0)],
            [f"real-time soak ({data['hours']} h): RSS first hour / last hour, peak",
             f"{_mean(rss[:60]):.1f} / {_mean(rss[-60:]):.1f} MB, {max(rss):.1f} MB",
             f"<= {RSS_MB} MB", "—", _ok(max(rss) <= RSS_MB)]]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def sec_soak(doc: Doc) -> str:
    data, plan = doc["data"], doc["plan"]
    mins = data["minutes"]
    if not data.get("finished"):
        return f"Cut short after {len(mins)} minutes: no count.\n"
    faults = {}
    for f in data["faults"]:
        faults[f["fault"]] = faults.get(f["fault"], 0) + 1
    out = [f"{data['hours']} hours of wall-clock time on the real Slurm {plan['slurm']} "
           f"cluster (issue 37, item 5): a job submitted every {plan['churn_interval_s']:.0f} s "
           f"({data['submitted']:,} submissions, {data['jobs']:,} runs: short, long, failing, "
           "multi-node, cancelled, array and GPU jobs, each through PrologSlurmctld's hook and "
           "the poll), delivered to the real cc-backend 1.5.4 (commit worker at its default) "
           "through the fault proxy and published on NATS; a random fault "
           f"({', '.join(f'{k} x{v}' for k, v in sorted(faults.items()))}) in "
           f"{plan['fault_chance_per_minute']:.0%} of the minutes.", "",
           f"**Lost {data['lost']}, duplicated {data['duplicated']}, wrong {data['wrong']}** "
           f"(REST and NATS); {_exit(data['exit_code'])}; its token in "
           f"its log: {'yes' if data['token_in_log'] else 'no'}.", ""]
    if data.get("plot"):
        out += [f"![the daemon's figures minute by minute](tests/bench/results/"
                f"{data['plot']})", ""]
    out += ["| minute | RSS MB | fds | threads | outbox MB | CPU s so far | log lines so far | "
            "pending | fault |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in mins:
        if m["minute"] % 10 == 0 or m is mins[0]:
            out.append(f"| {m['minute']} | {m['rss_mb']:.1f} | {m['fds']} | {m['threads']} | "
                       f"{m['outbox_mb']:.1f} | {m['cpu_s']:.1f} | {m['log_lines']} | "
                       f"{m['pending']} | {m['fault'] or ''} |")
    return "\n".join(out) + "\n"


def _exit(code: int | None) -> str:
    if code is None:
        return "the daemon's exit on SIGTERM was not recorded"
    return f"the daemon exited {code} on SIGTERM"
