"""The stand-in's job cache and the answers around it, each following cc-backend v1.5.4.

Citations are FILE:LINES at tag v1.5.4 of ClusterCockpit/cc-backend, FILE under internal/
(``api/job.go`` is internal/api/job.go); ``09_add-job-cache`` is
internal/repository/migrations/sqlite3/09_add-job-cache.up.sql.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import requests

from tests.standin.ccbackend import SUBCLUSTER, CcBackendStandin
from tests.unit.test_standin import (
    _DELETE,
    DAY,
    JOBS,
    REPO,
    START,
    STOP,
    T0,
    TOKEN,
    Api,
    error_of,
    start_body,
    stop_body,
    wait_for,
)

HOUR = 3600.0  # a commit interval no test waits for: tests commit by hand (commit_now)


@pytest.fixture
def session():
    with requests.Session() as s:
        s.headers["X-Auth-Token"] = TOKEN
        s.trust_env = False  # only loopback traffic
        yield s


@pytest.fixture
def cached_standin():
    """A stand-in whose commit worker never runs on its own during a test."""
    with CcBackendStandin(token=TOKEN, commit_interval=HOUR) as st:
        yield st


@pytest.fixture
def api(cached_standin, session) -> Api:
    return Api(cached_standin, session)


def listed(api: Api, **params) -> list[tuple[int, int]]:
    r = api.jobs(**{"items-per-page": 100, **params})
    assert r.status_code == 200, r.text
    return [(j["jobId"], j["startTime"]) for j in r.json()["jobs"]]


# --- start_job: into the cache; the commit worker moves it ------------------------------------


def test_start_goes_to_the_cache_until_a_commit(api, cached_standin):
    # api/job.go:771 (Start) -> repository/jobCreate.go:54-70 (InsertJob: job_cache)
    st = cached_standin
    r = api.start(start_body())
    assert r.status_code == 201 and r.json() == {"msg": "success"}
    assert st.jobs() == []
    (row,) = st.cached()
    assert (row["jobId"], row["startTime"], row["jobState"], row["id"]) == (3, T0, "running", 1)
    # repository/jobQuery.go:48: GET /api/jobs/ reads `job` only
    assert listed(api) == [] and listed(api, state="running") == []
    # repository/jobCreate.go:72-139 (SyncJobs): cached rows into `job`, the cache emptied
    assert st.commit_now() == 1
    assert st.cached() == [] and [j["id"] for j in st.jobs()] == [1]
    assert listed(api, state="running", cluster="cluster24") == [(3, T0)]
    assert st.commit_now() == 0
    # the cache's ids are its own INTEGER PRIMARY KEY: an emptied table starts at 1 again
    assert api.start(start_body(4)).status_code == 201
    assert [r["id"] for r in st.cached()] == [1]
    st.commit_now()
    assert [(j["jobId"], j["id"]) for j in st.jobs()] == [(3, 1), (4, 2)]


def test_start_sent_again_while_cached_is_500_and_422_once_committed(api, cached_standin):
    # api/job.go:748-762: the duplicate check (FindAll, repository/jobFind.go:86-124, :96
    # From("job")) does not see the cache; the insert then breaks job_cache's
    # UNIQUE (job_id, cluster, start_time) (09_add-job-cache:33): 500 (api/job.go:773-776).
    assert api.start(start_body()).status_code == 201
    r = api.start(start_body())
    assert r.status_code == 500
    assert error_of(r) == ("insert into database failed: UNIQUE constraint failed: "
                           "job_cache.job_id, job_cache.cluster, job_cache.start_time")
    assert r.json()["status"] == "Internal Server Error"
    assert len(cached_standin.cached()) == 1
    cached_standin.commit_now()
    r = api.start(start_body())  # now FindAll sees it: 422 (api/job.go:757-759)
    assert r.status_code == 422 and "already exists" in error_of(r)
    assert len(cached_standin.jobs()) == 1 and cached_standin.cached() == []


def test_other_start_time_while_cached_is_a_second_job(api, cached_standin):
    st = cached_standin
    assert api.start(start_body()).status_code == 201
    # within a day, later and earlier: the job table is empty, so no 422 (api/job.go:757);
    # other start times break no UNIQUE: two more rows
    assert api.start(start_body(startTime=T0 + 60)).status_code == 201
    assert api.start(start_body(startTime=T0 - 60)).status_code == 201
    assert [r["startTime"] for r in st.cached()] == [T0, T0 + 60, T0 - 60]
    # SyncJobs' INSERT OR IGNORE (repository/jobCreate.go:103-105) keeps all three
    assert st.commit_now() == 3
    assert sorted(j["startTime"] for j in st.jobs()) == [T0 - 60, T0, T0 + 60]
    # committed, the usual check holds: any start within a day after one of them is 422
    assert api.start(start_body(startTime=T0 + 120)).status_code == 422
    assert len(st.jobs()) == 3


def test_committing_keeps_the_commit_order_of_ids(api, cached_standin):
    for job_id in (7, 5, 6):
        assert api.start(start_body(job_id)).status_code == 201
    cached_standin.commit_now()
    assert [(j["jobId"], j["id"]) for j in cached_standin.jobs()] == [(7, 1), (5, 2), (6, 3)]


def test_start_with_tags_goes_straight_to_the_job_table(api, cached_standin):
    st = cached_standin
    tags = [{"type": "t", "name": "n", "scope": "global"}]
    # api/job.go:768-769: StartDirect (repository/jobCreate.go:198-215), listed at once
    assert api.start(start_body(tags=tags)).status_code == 201
    assert st.cached() == [] and listed(api) == [(3, T0)]
    assert api.start(start_body(tags=tags)).status_code == 422
    # the same run, untagged, cached while a tagged start of it comes: FindAll finds
    # nothing in `job`, so the tagged one is a second row there, and the cache keeps its own
    assert api.start(start_body(4)).status_code == 201
    assert api.start(start_body(4, tags=tags)).status_code == 201
    assert [j["jobId"] for j in st.cached()] == [4]
    # its stop finds the cached row first (api/job.go:830) and moves it to `job` by a plain
    # INSERT (repository/jobCreate.go:150-155): UNIQUE on `job` fails, 500 (api/job.go:1029-1033)
    r = api.stop(stop_body(4))
    assert r.status_code == 500
    assert error_of(r).endswith("UNIQUE constraint failed: job.job_id, job.cluster, "
                                "job.start_time")
    # the commit skips what `job` holds (INSERT OR IGNORE, :103-105) and empties the cache
    assert st.commit_now() == 0
    assert st.cached() == []
    assert api.stop(stop_body(4)).status_code == 200
    assert sorted(j["jobId"] for j in st.jobs()) == [3, 4]


# --- stop_job: the cache first -----------------------------------------------------------------


def test_stop_of_a_cached_job_moves_it_and_the_commit_adds_nothing(api, cached_standin):
    st = cached_standin
    assert api.start(start_body()).status_code == 201
    assert api.start(start_body(4)).status_code == 201
    # api/job.go:829-840: FindCached first; :1026-1036 moves the row into `job`, so the
    # answer carries the job table's id; :1038 stops it there
    r = api.stop(stop_body(4, stopTime=T0 + 30))
    assert r.status_code == 200, r.text
    job = r.json()
    assert (job["jobId"], job["id"], job["jobState"], job["duration"]) == (4, 1, "completed", 30)
    assert [j["jobId"] for j in st.cached()] == [3]
    assert [(j["jobId"], j["jobState"]) for j in st.jobs()] == [(4, "completed")]
    assert listed(api, state="completed") == [(4, T0)]
    # stopped twice: now found in `job`, not running: 422 (api/job.go:1003-1006)
    assert api.stop(stop_body(4)).status_code == 422
    # the commit moves the other one; the stopped job is not added again
    assert st.commit_now() == 1
    assert sorted((j["jobId"], j["jobState"]) for j in st.jobs()) == [
        (3, "running"), (4, "completed")]


def test_stop_looks_in_the_cache_before_the_job_table(api, cached_standin):
    st = cached_standin
    assert api.start(start_body()).status_code == 201
    st.commit_now()  # run 1 in `job`
    assert api.start(start_body(startTime=T0 + DAY)).status_code == 201  # run 2 cached
    # without startTime: FindCached's newest match wins over `job` (api/job.go:830-840)
    r = api.stop(stop_body(startTime=_DELETE, stopTime=T0 + DAY + 5))
    assert r.status_code == 200 and r.json()["startTime"] == T0 + DAY
    # with run 1's startTime the cache has nothing, so Find in `job` (jobFind.go:25-49)
    r = api.stop(stop_body(stopTime=T0 + 5))
    assert r.status_code == 200 and r.json()["startTime"] == T0
    assert st.cached() == [] and {j["jobState"] for j in st.jobs()} == {"completed"}


def test_stop_of_an_unknown_run_is_404_in_both_tables(api, cached_standin):
    assert api.start(start_body()).status_code == 201  # cached
    for changes in ({"startTime": T0 + 1}, {"cluster": "cluster22"}, {"jobId": 4}):
        r = api.stop(stop_body(**changes))
        assert r.status_code == 404  # api/job.go:833-836
        assert error_of(r) == "finding job failed: sql: no rows in result set"


# --- shared, and what cc-backend stores --------------------------------------------------------


@pytest.mark.parametrize("shared", ["exclusive", "", "NONE"])
def test_shared_outside_the_three_values_is_500(api, cached_standin, shared):
    # not a sanity check (importer/initDB.go:260-282); the CHECK of job_cache
    # (09_add-job-cache:26-27) fails the insert: 500 (api/job.go:773-776)
    r = api.start(start_body(shared=shared))
    assert r.status_code == 500
    assert error_of(r) == ('insert into database failed: CHECK constraint failed: shared IN '
                           '("none", "single_user", "multi_user")')
    # with tags the job table's CHECK (09_add-job-cache:61-62) does the same
    tags = [{"type": "t", "name": "n", "scope": "global"}]
    assert api.start(start_body(shared=shared, tags=tags)).status_code == 500
    assert cached_standin.cached() == [] and cached_standin.jobs() == []


def test_a_duplicate_is_422_before_shared_is_looked_at(api, cached_standin):
    # the duplicate check (api/job.go:748-762) comes before the insert (:767-776)
    assert api.start(start_body()).status_code == 201
    cached_standin.commit_now()
    assert api.start(start_body(shared="exclusive")).status_code == 422


def test_what_cc_backend_stores_and_reads_back(api, cached_standin):
    body = start_body(requestedMemory=4000, energyFootprint={"e": 1.0},
                      statistics={"flops": {"unit": {"base": "F/s"}, "avg": 1, "min": 0,
                                            "max": 2}})
    assert api.start(body).status_code == 201
    cached_standin.commit_now()
    (job,) = api.jobs(**{"with-metadata": "true"}).json()["jobs"]
    # repository/jobCreate.go:17-23 stores no submit_time or requested memory, and
    # repository/job.go:129-135 (jobColumns) reads no energy_footprint back
    assert "submitTime" not in job and "requestedMemory" not in job
    assert job["energyFootprint"] is None
    assert job["statistics"] is None  # filled from the archive only (api/job.go:215-221)
    assert job["metaData"] == body["metaData"]  # with-metadata (api/job.go:202-207)
    assert job["subCluster"] == SUBCLUSTER  # pkg/archive/clusterConfig.go:254-265
    assert cached_standin.jobs()[0] == job


def test_a_given_subcluster_must_be_known(api, cached_standin):
    # pkg/archive/clusterConfig.go:241-248
    r = api.start(start_body(subCluster="gpu"))
    assert r.status_code == 400
    assert error_of(r) == ("ARCHIVE/CLUSTERCONFIG > already assigned subcluster gpu unkown "
                           "(cluster: cluster24)")
    assert api.start(start_body(subCluster=SUBCLUSTER)).status_code == 201


# --- the commit worker on its own --------------------------------------------------------------


def test_the_commit_worker_runs_every_interval(session):
    with CcBackendStandin(token=TOKEN, commit_interval=1.0) as st:
        workers = f"ccbackend-standin-commit:{st.port}"
        api = Api(st, session)
        started = time.monotonic()
        assert api.start(start_body()).status_code == 201
        if time.monotonic() - started < 0.5:  # else the machine is too slow to tell
            assert st.jobs() == [] and len(st.cached()) == 1
        assert wait_for(lambda: len(st.jobs()) == 1, timeout=5)
        assert api.start(start_body(4)).status_code == 201
        assert wait_for(lambda: len(st.jobs()) == 2, timeout=5)  # and again, an interval on
        assert any(t.name == workers for t in threading.enumerate())
    assert not any(t.name == workers for t in threading.enumerate())  # stop() joined it
    assert st.cached() == []


def test_zero_interval_commits_each_start_at_once(session):
    with CcBackendStandin(token=TOKEN) as st:
        assert st.commit_interval == 0
        api = Api(st, session)
        assert api.start(start_body()).status_code == 201
        assert st.cached() == [] and len(st.jobs()) == 1
        assert api.start(start_body()).status_code == 422  # never the cache's 500
    with pytest.raises(ValueError, match="commit_interval"):
        CcBackendStandin(commit_interval=-1)


def test_reset_empties_the_cache(api, cached_standin):
    assert api.start(start_body()).status_code == 201
    cached_standin.reset()
    assert cached_standin.cached() == [] and cached_standin.jobs() == []
    assert api.start(start_body()).status_code == 201


def test_standalone_commit_interval_flag():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.standin.ccbackend", "--port", "0", "--token", "X",
         "--cluster", "cluster24", "--commit-interval", "3600", "--quiet"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        with requests.Session() as s:
            s.trust_env = False
            s.headers["X-Auth-Token"] = "X"
            assert s.post(url + START, json=start_body(), timeout=10).status_code == 201
            assert s.post(url + START, json=start_body(), timeout=10).status_code == 500
            assert s.get(url + JOBS, timeout=10).json()["jobs"] == []
            assert s.post(url + STOP, json=stop_body(), timeout=10).status_code == 200
            assert len(s.get(url + JOBS, timeout=10).json()["jobs"]) == 1
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
