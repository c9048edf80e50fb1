"""The JWT as cc-backend sees it (issue 35, item 7): a ccRestJwtFile rotated while the daemon
runs is taken without a restart, and a refusal names the key the token came from."""

from __future__ import annotations

import logging
import os

from ccadapter.config.keys import Config
from ccadapter.daemon.build import build
from ccadapter.outbox import NewEvent
from tests.conftest import ReplayRunner
from tests.standin.ccbackend import CcBackendStandin

OLD, NEW = "token-before-rotation", "token-after-rotation"


def slurm() -> ReplayRunner:
    return ReplayRunner(lambda argv: "ClusterName = c\nAcctGatherEnergyType = (null)\n")


def start(job_id: int) -> NewEvent:
    return NewEvent("c", job_id, 100, "start", {
        "jobId": job_id, "cluster": "c", "user": "u", "project": "p", "startTime": 100,
        "numNodes": 1, "numHwthreads": 1, "resources": [{"hostname": "n1"}]})


def test_a_rotated_jwt_file_is_taken_without_a_restart(tmp_path, caplog):
    jwt = tmp_path / "jwt"
    jwt.write_text(OLD + "\n")
    with CcBackendStandin(OLD, clusters=["c"]) as standin:
        app = build(Config(ccRestUrl=standin.url, ccRestJwtFile=str(jwt),
                           stateDirectory=str(tmp_path / "state"),
                           lastRunPath=str(tmp_path / "lr")), runner=slurm(), workers=2)
        try:
            app.outbox.enqueue([start(1)])
            assert app.deliverer.run_once().delivered == 1
            # the site rotates the token: cc-backend refuses the old one from now on
            standin.token = NEW
            jwt.write_text(NEW + "\n")
            os.utime(jwt, (1, 1))  # even a copy that keeps an old mtime (install -p, cp -p)
            app.outbox.enqueue([start(2)])
            with caplog.at_level(logging.ERROR):
                stats = app.deliverer.run_once()
            assert stats.delivered == 1, caplog.text
            # at most one request with the old token: refused, sent again with the new one
            statuses = [r.status for r in standin.requests()]
            assert statuses in ([201, 201], [201, 401, 201]), statuses
        finally:
            app.close()


def test_a_refused_token_names_the_key_it_came_from(tmp_path, caplog):
    jwt = tmp_path / "jwt"
    jwt.write_text("not-the-token\n")
    with CcBackendStandin(OLD, clusters=["c"]) as standin:
        app = build(Config(ccRestUrl=standin.url, ccRestJwtFile=str(jwt),
                           stateDirectory=str(tmp_path / "state"),
                           lastRunPath=str(tmp_path / "lr")), runner=slurm(), workers=2)
        try:
            app.outbox.enqueue([start(1)])
            with caplog.at_level(logging.ERROR):
                app.deliverer.run_once()
            assert app.client is not None
            problem = app.client.last_problem or ""
        finally:
            app.close()
    said = [r.getMessage() for r in caplog.records if "refused our token" in r.getMessage()]
    assert said and all(f"ccRestJwtFile ({jwt})" in line for line in said), said
    assert "check ccRestJwt " not in caplog.text and "check ccRestJwt:" not in caplog.text
    assert f"ccRestJwtFile ({jwt})" in problem
    assert "not-the-token" not in caplog.text + problem

