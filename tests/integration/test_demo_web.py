"""The demo as a newcomer meets it (issue 39): ``tests/testbed/demo`` run as the README's first
command, then cc-backend's own web interface read by a real browser, Debian's Chromium,
headless, driven by Selenium through Debian's chromedriver. It logs in with the login the demo
printed, opens the job list of the demo's cluster and finds every run of the demo's jobs there
with the state Slurm gives it; the running GPU job's page names its node and plots what
cc-metric-collector sent of it (issue 45): its node's cpu_load and mem_used, and cpu_user of
exactly the hwthreads the job is held with, in the page's statistics table. Screenshots of both
pages are kept in :data:`SHOTS`. ``tests/testbed/demo down`` ends it, as the demo says.

The browser reaches 127.0.0.1 only: every other host name resolves to nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable
from tests.integration.sync_scenario import wait_for
from tests.testbed.collector_site import METRICS
from tests.testbed.demo_site import HOME, PORT, REPO, USER, port_free

pytestmark = pytest.mark.integration

DEMO = REPO / "tests" / "testbed" / "demo"
SHOTS = HOME.parent / "demo-screenshots"
STATES = {"COMPLETED": "completed", "FAILED": "failed", "RUNNING": "running"}


@contextmanager
def chromium() -> Iterator[Any]:
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver):
        unavailable("Debian's chromium and chromium-driver are missing (tests/run installs them)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed: pip install -e '.[test]'")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1600,1200", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        opts.add_argument(arg)
    b = webdriver.Chrome(options=opts, service=Service(executable_path=driver))
    try:
        yield b
    finally:
        b.quit()


def slurm_states(jobs: list[dict[str, Any]]) -> dict[int, tuple[str, str]]:
    """Each run of the demo's jobs as Slurm's accounting holds it: job id -> (Slurm's label
    of it, the state cc-backend must show)."""
    ids = ",".join(str(j["job_id"]) for j in jobs)
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ids, "-o", "JobIDRaw,JobID,State"],
                         check=True, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL).stdout
    runs = {}
    for line in out.splitlines():
        raw, label, state = line.split("|")
        runs[int(raw)] = (label, STATES.get(state.split()[0], state.lower()))
    return runs


def row_of(b: Any, job_id: int) -> Any:
    from selenium.webdriver.common.by import By

    rows = b.find_elements(By.XPATH, "//tbody/tr[.//a[starts-with(@href, '/monitoring/job/')"
                                     f" and normalize-space() = '{job_id}']]")
    return rows[0] if rows else None


NUMBER = r"-?\d+(\.\d+)?"


def read_cmdline(proc: Path) -> bytes:
    try:
        return proc.joinpath("cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


def ids_of(spans: str) -> list[int]:
    """The ids of the demo table's ``0-2,8`` spans."""
    out: list[int] = []
    for span in spans.split(","):
        first, _, last = span.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return sorted(out)


def plotted_stats(b: Any, node: str) -> tuple[list[str], list[int]] | None:
    """The job page's statistics table once every metric of :data:`METRICS` is plotted
    with data: the node's row of figures (cpu_load's and mem_used's min, avg, max) and the
    hwthread ids cpu_user's part lists; None while a panel has no data yet."""
    from selenium.webdriver.common.by import By

    if len(b.find_elements(By.CSS_SELECTOR, ".uplot canvas")) < len(METRICS):
        return None
    text = b.find_element(By.TAG_NAME, "body").text
    if any(f"No dataset(s) returned for {m}" in text for m in METRICS):
        return None
    if "Node min avg max" not in text:
        return None
    lines = text.split("Node min avg max", 1)[1].splitlines()
    row = next((ln.split()[1:] for ln in lines if ln.split()[:1] == [node]), [])
    ids = [int(ln.split()[0]) for ln in lines
           if re.fullmatch(rf"\d+( {NUMBER}){{3}}", ln.strip())]
    if len(row) != 6 or not all(re.fullmatch(NUMBER, v) for v in row) or not ids:
        return None
    return row, ids


def run_demo(timeout: float) -> subprocess.CompletedProcess[str]:
    """``tests/testbed/demo`` in a session of its own: a demo cut by the timeout is killed
    whole (its build, its Slurm start), not left holding cluster22."""
    proc = subprocess.Popen([str(DEMO)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the demo did not end in {timeout:.0f} s: {err[-3000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_demo_ends_with_its_jobs_in_cc_backends_web_interface() -> None:
    from_cold = time.monotonic()
    with chromium() as b:
        try:
            out = run_demo(900)
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-5000:]
            took = time.monotonic() - from_cold
            doc = json.loads((HOME / "demo.json").read_text())
            url, cluster = doc["url"], doc["cluster"]
            assert f"{url}/monitoring/jobs/?cluster={cluster}" in out.stdout
            assert f"login: {doc['login']} / {doc['password']}" in out.stdout
            assert "tests/testbed/demo down" in out.stdout
            runs = slurm_states(doc["jobs"])
            assert len(runs) == 7, runs  # GPU, two nodes, a failure, an array of three, SMT
            for label, state in runs.values():
                assert any(ln.split()[:3] == [label, ln.split()[1], state]
                           for ln in out.stdout.splitlines() if ln.strip().startswith(label)), (
                    f"{label} {state} not in the demo's table:\n{out.stdout}")
            # one core of an SMT node (2x4x2): Linux numbers its threads k and k + 8
            smt = next(r for r in doc["runs"] if r["name"] == "demo-smt-core")
            host, _, spans = smt["os_ids"].partition(":")
            first, second = ids_of(spans)
            assert (host, second) == (smt["nodes"], first + 8), smt
            SHOTS.mkdir(parents=True, exist_ok=True)
            from selenium.webdriver.common.by import By

            b.get(f"{url}/login")
            b.find_element(By.ID, "username").send_keys(doc["login"])
            b.find_element(By.ID, "password").send_keys(doc["password"])
            b.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            wait_for(lambda: "/login" not in b.current_url
                     and b.find_elements(By.ID, "svelte-header"), 30, "the login accepted")

            b.get(f"{url}/monitoring/jobs/?cluster={cluster}")

            def every_row() -> bool:
                missing = [j for j in runs if row_of(b, j) is None]
                if missing:  # ten rows a page, the next as the window scrolls down
                    b.execute_script("window.scrollTo(0, document.body.scrollHeight)")
                return not missing

            wait_for(every_row, 60, f"a row for each of {sorted(runs)}")
            for job_id, (label, state) in runs.items():
                row = row_of(b, job_id)
                badges = [e.text.strip() for e in row.find_elements(By.CSS_SELECTOR, ".badge")]
                assert state in badges, f"job {label}: {badges} in its row, Slurm says {state}"
                assert f"({cluster})" in row.text
            b.execute_script("window.scrollTo(0, 0)")
            b.save_screenshot(str(SHOTS / "job-list.png"))

            gpu = next(r for r in doc["runs"] if r["expect"] == "running")
            assert runs[gpu["job_id"]][1] == "running"
            b.get(f"{url}/monitoring/job/{gpu['db_id']}")
            wait_for(lambda: b.title.startswith(f"Job {gpu['job_id']} "), 30,
                     "the running job's page titled with its Slurm id")
            node = gpu["nodes"]
            named = f"//th[normalize-space() = '{node}'] | //b[normalize-space() = '{node}']"
            wait_for(lambda: b.find_elements(By.XPATH, named), 60,
                     f"its node {node} named on its page")
            assert "running" in [e.text.strip() for e in b.find_elements(By.CSS_SELECTOR, ".badge")]
            # the collectors' samples: plotted, and cpu_user of the job's own hwthreads only
            held = re.fullmatch(rf"{node}:(\S+)( .*)?", gpu["os_ids"])
            assert held, gpu
            own = ids_of(held.group(1))
            stats: list[Any] = []

            def plotted() -> bool:
                stats[:] = [plotted_stats(b, node)]
                if stats[0] is None:  # fetched once per load: a panel without data yet
                    time.sleep(3)
                    b.refresh()
                return stats[0] is not None

            wait_for(plotted, 90, f"{', '.join(METRICS)} plotted with data on the job's page")
            row, ids = stats[0]
            assert ids == own, f"cpu_user of hwthreads {ids}, the job is held with {own}"
            b.save_screenshot(str(SHOTS / "job-page.png"))
            print(f"demo ready {took:.0f} s after it was started; screenshots: "
                  f"{SHOTS / 'job-list.png'}, {SHOTS / 'job-page.png'}")
        finally:
            down = subprocess.run([str(DEMO), "down"], capture_output=True, text=True,
                                  timeout=300, stdin=subprocess.DEVNULL)
    assert down.returncode == 0, down.stderr[-3000:]
    # nothing of the demo listens any more: cc-backend's port and cluster22's hook port are free
    hook_port = int(doc["hook_socket"].rsplit(":", 1)[1])
    assert port_free(PORT) and port_free(hook_port), "left running by tests/testbed/demo down"
    collectors = [p.name for p in Path("/proc").glob("[0-9]*")
                  if str(HOME / "collector").encode() in read_cmdline(p)]
    assert not collectors, f"cc-metric-collector left running by demo down: pids {collectors}"
    left = subprocess.run(["squeue", "-h", "-u", USER, "-o", "%i %j"], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL).stdout
    assert not [ln for ln in left.splitlines() if " demo-" in ln], left
