"""Issue 37's month of life, short (item 4): three days of a site's time at 600 jobs a day,
the site clock 2,880 times faster than real time, every incident of the month on its own
day, against the real cc-backend 1.5.4 (tests/bench/life.py says what is real and what is
simulated). The 30-day run is the benchmark ``tests.bench.life`` (BENCHMARKS.md).

Every run that started is held by cc-backend exactly once with Slurm's state, duration,
array id and nodes, or counted as a documented exception; every incident is recovered from
without a person; the daemon's SIGTERM during a catch-up ends it within seconds."""

from __future__ import annotations

import pytest

from tests.bench.life import INCIDENTS, live, short_plan

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(1500)
def test_three_site_days_with_every_incident_lose_duplicate_and_garble_nothing(tmp_path):
    data = live(short_plan(), keep=tmp_path)
    problems = data["problems"]
    assert data["settled"], "the outbox never emptied after the last run ended"
    assert (data["lost"], data["duplicated"], data["wrong"]) == (0, 0, 0), problems
    assert data["checked"] > 1500
    happened = {i["name"]: i for i in data["incidents"]}
    assert set(happened) >= set(INCIDENTS)
    assert [(i["name"], i.get("error")) for i in data["incidents"] if not i["recovered"]] == []
    term = happened["daemon SIGTERMed during a catch-up"]
    assert (term["exit_code"], term["exit_real_s"] < 10) == (0, True), term
    assert happened["daemon SIGKILLed during a catch-up"]["exit_code"] == -9
    # the two unreadable jobs are counted apart (`ccadapter unreadable list`), never lost
    assert data["exceptions"]["record Slurm cannot print or ccadapter cannot read"] == 2
    assert data["final_exit_code"] == 0 and not data["token_in_log"]
