"""The web dashboard in a real browser (Debian's Chromium driven by Playwright) against a
real cluster (a JobMaster and two TaskExecutors as processes, with a token): a
back-pressured job with unaligned checkpoints, then a TaskExecutor killed with SIGKILL.
What a person would look for: the TaskExecutors and the running job on the overview, the
source drawn back-pressured and the slow map busy, the completed unaligned checkpoints the
API lists with per-subtask timings, and the restart with its cause (the lost
TaskExecutor). Screenshots go to build/screenshots/."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium  # noqa: F401  (the fixture)
from tests.support.cluster import REPO, poll, write_job

#: Beyond `make test`'s representative set: run by `make test-more`.
pytestmark = pytest.mark.extended

TOKEN = "dashboard-test-token"
SHOTS = REPO / "build" / "screenshots"
#: A fast source, a deliberately slow map behind a key_by, a sink behind a rebalance: three
#: vertices, the source back-pressured by the busy map.
BACKPRESSURED = """
    import time

    from weir import DiscardingSink, StreamExecutionEnvironment

    class Slow:
        # About 1000 records/s per subtask: far slower than the source.
        def __call__(self, record):
            time.sleep(0.001)
            return record

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_sequence(0, 10**9).name("numbers").map(lambda n: (n % 100, "x" * 200))
        .name("pad").key_by(lambda t: t[0]).map(Slow()).name("slow map")
        .rebalance().sink_to(DiscardingSink()).name("discard"))
    env.execute("backpressured")
"""
CONFIG = {"execution.checkpointing.interval": "500 ms",
          "execution.checkpointing.unaligned.enabled": "true",
          "restart-strategy.type": "fixed-delay",
          "restart-strategy.fixed-delay.attempts": "10",
          "restart-strategy.fixed-delay.delay": "200 ms"}
#: Playwright's waits, in ms.
SHORT_MS, LONG_MS = 15_000, 90_000


def get(base: str, path: str) -> Any:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def wait_running(base: str, job_id: str, timeout: float) -> None:
    """Until the job and every vertex run (through the API: the test's gRPC client has
    no token)."""
    def running() -> bool:
        job = get(base, f"/jobs/{job_id}")
        return job["state"] == "RUNNING" and all(v["status"] == "RUNNING"
                                                 for v in job["vertices"])

    poll(running, timeout, interval=0.2, what=f"job {job_id} to run")


def shot(page: Any, name: str, down_to: str | None = None) -> None:
    """A screenshot of the page, or of its top down to the element ``down_to``."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    if down_to is None:
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        return
    box = page.locator(down_to).bounding_box()
    width = page.viewport_size["width"]
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True,
                    clip={"x": 0, "y": 0, "width": width, "height": box["y"] + box["height"] + 16})


@pytest.fixture
def backpressured_job(monkeypatch: pytest.MonkeyPatch, cluster_factory: Any,
                      tmp_path: Path) -> tuple[Any, str, str]:
    monkeypatch.setenv("WEIR_SECURITY_AUTH_TOKEN", TOKEN)
    cluster = cluster_factory(2, 2)
    job = write_job(tmp_path, BACKPRESSURED)
    result = cluster.weir("run", "--detached", *(f"-D{k}={v}" for k, v in CONFIG.items()),
                          str(job))
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip().splitlines()[-1]
    base = cluster.status()["jobmaster"]["rest_url"]
    wait_running(base, job_id, 60)
    return cluster, job_id, base


def test_dashboard_shows_backpressure_checkpoints_and_a_recovery(
        backpressured_job: tuple[Any, str, str], chromium: Any,  # noqa: F811
        tmp_path: Path) -> None:
    from playwright.sync_api import expect

    cluster, job_id, base = backpressured_job
    vertices = {v["name"]: v["id"] for v in get(base, f"/jobs/{job_id}")["vertices"]}
    source, slow = vertices["numbers -> pad"], vertices["slow map"]
    page = chromium.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))

    # The page loads without the token, asks for it on the API's 401 and then shows the
    # overview: both TaskExecutors, the running job.
    page.goto(base + "/")
    page.fill("form.login input[name=token]", TOKEN, timeout=SHORT_MS)
    page.click("form.login button[type=submit]")
    expect(page.locator("[data-count=taskmanagers]")).to_have_text("2", timeout=SHORT_MS)
    expect(page.locator("[data-count=jobs-running]")).to_have_text("1")
    row = page.locator(f"tr.job[data-job-id='{job_id}']")
    expect(row).to_contain_text("RUNNING")
    expect(page.locator("tr.taskmanager")).to_have_count(2)
    shot(page, "overview")

    # The graph: three vertices; the source back-pressured, the slow map busy.
    row.click()
    expect(page).to_have_url(re.compile(f"#/jobs/{job_id}/graph$"))
    expect(page.locator("g.vertex")).to_have_count(3, timeout=SHORT_MS)
    source_box = page.locator(f"g.vertex[data-vertex-id='{source}']")
    slow_box = page.locator(f"g.vertex[data-vertex-id='{slow}']")
    expect(source_box).to_have_attribute("data-state", "backpressured", timeout=LONG_MS)
    expect(source_box).to_contain_text("BACKPRESSURED")
    expect(slow_box).to_have_attribute("data-state", "busy", timeout=LONG_MS)
    expect(slow_box).to_contain_text("BUSY")
    # Its subtasks: where they run, their busy time.
    slow_box.click()
    expect(page).to_have_url(re.compile(f"#/jobs/{job_id}/graph/{slow}$"))
    subtasks = page.locator(f".vertex-panel[data-vertex-id='{slow}'] table.subtasks tbody tr")
    expect(subtasks).to_have_count(2, timeout=SHORT_MS)
    resource_ids = [te["resource_id"] for te in cluster.status()["taskexecutors"]]
    expect(subtasks.first).to_contain_text(re.compile("|".join(map(re.escape, resource_ids))))
    shot(page, "job-graph", down_to=".vertex-panel")

    # Checkpoints: the completed ones are the API's, unaligned; one opens into its
    # vertices, a vertex into its subtasks' alignment, sync and async times.
    page.click("a[data-tab=checkpoints]")
    completed = page.locator("tr.checkpoint[data-status=COMPLETED]")
    expect(completed.nth(2)).to_be_visible(timeout=LONG_MS)
    shown = [int(i) for i in completed.evaluate_all(
        "rows => rows.map(r => r.dataset.checkpointId)")]
    api_completed = {c["id"] for c in get(base, f"/jobs/{job_id}/checkpoints")["history"]
                     if c["status"] == "COMPLETED"}
    assert set(shown) <= api_completed and len(shown) >= 3, (shown, api_completed)
    expect(completed.first).to_have_attribute("data-type", "UNALIGNED_CHECKPOINT")
    expect(completed.first.locator(".badge.unaligned")).to_have_text("unaligned")
    expect(page.locator("dl.kv")).to_contain_text("enabled")
    completed.first.click()
    page.locator(f"table.checkpoint-vertices tr[data-vertex-id='{slow}']").click()
    rows = page.locator("table.checkpoint-subtasks tbody tr")
    expect(rows).to_have_count(2, timeout=SHORT_MS)
    for column in ("alignment", "sync", "async"):
        expect(rows.first.locator(f"td.{column}")).to_have_text(re.compile(r"^\d[\d.]* (ms|s)$"))
    shot(page, "checkpoints", down_to="table.checkpoints > tbody > tr.nested")

    # A TaskExecutor killed: the job restarts on the other one; the recoveries tab shows
    # the restart and its cause, the exceptions tab the lost TaskExecutor.
    victim = cluster.status()["taskexecutors"][0]["resource_id"]
    cluster.kill_taskexecutor(0, signal.SIGKILL)
    poll(lambda: get(base, f"/jobs/{job_id}")["restarts"] >= 1, 60, interval=0.2,
         what="the job to restart")
    wait_running(base, job_id, 120)
    page.click("a[data-tab=recoveries]")
    expect(page.locator("[data-count=restarts]")).not_to_have_text("0", timeout=SHORT_MS)
    recovery = page.locator("tr.recovery").first
    expect(recovery).to_contain_text(victim, timeout=SHORT_MS)
    expect(recovery).to_contain_text("lost")
    shot(page, "recoveries")
    page.click("a[data-tab=exceptions]")
    exception = page.locator(".exception").first
    expect(exception).to_contain_text(victim, timeout=SHORT_MS)
    expect(exception.locator("pre.trace")).to_be_visible()  # the newest one is open
    expect(exception.locator("pre.trace")).to_contain_text(victim)
    shot(page, "exceptions")

    # Back on the overview: the job runs on, with its restart counted.
    page.click("header a.brand")
    expect(row).to_contain_text("RUNNING", timeout=SHORT_MS)
    expect(page.locator("[data-count=jobs-running]")).to_have_text("1")

    # The job's actions: a savepoint into the directory typed at the prompt, then a cancel
    # confirmed in its dialog.
    row.click()
    target = (tmp_path / "savepoints").as_uri()
    page.once("dialog", lambda dialog: dialog.accept(target))
    page.click("button:has-text('Trigger savepoint')")
    message = page.locator(".action-message")
    expect(message).to_contain_text("Savepoint stored at", timeout=LONG_MS)
    stored = list((tmp_path / "savepoints").glob("*/_metadata"))
    assert len(stored) == 1, stored
    expect(message).to_contain_text(stored[0].parent.name)
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Cancel job')")
    expect(page.locator("[data-job-state]")).to_have_text("CANCELED", timeout=LONG_MS)
    assert get(base, f"/jobs/{job_id}")["state"] == "CANCELED"
    assert not errors, errors
