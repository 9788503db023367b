"""Dashboard: how long the web dashboard's job page takes to load in a real browser for a
large job, and what the REST calls behind it cost the JobMaster.

Setup
-----
A real local cluster (``weir cluster start``: a JobMaster and 2 TaskExecutors as
processes, ``--slots`` 8 each, 16 in all) runs one real job of ``--vertices`` vertices (50)
at parallelism ``--parallelism`` (16), chaining disabled, so the JobMaster tracks 50 x 16 =
800 subtasks: a sequence source paced to about 10 records a second per subtask, then
``--vertices - 2`` maps in ``BRANCHES`` parallel branches (forward edges), their union,
and a discarding sink. The job is nearly idle: what is measured is the dashboard, not
the job.

Measured (Debian's Chromium, headless, driven by Playwright; never downloaded):

* **job page**: from ``page.goto(.../#/jobs/JOB/graph)`` in a fresh tab to every vertex of
  the graph drawn (``g.vertex`` count = vertices), ``--loads`` times (5); the first load
  has an empty browser cache, the others revalidate it (the vendored libraries are cached,
  our own files answer 304). Median and max reported; target: median < 1 s.
* **vertex panel**: from selecting a vertex (its URL) to its 16 subtask rows.
* **REST server time**: each request the job page makes, timed from this process with
  urllib (``--loads`` times each, median): ``/config``, ``/jobs/:jobid`` (which carries
  the plan and every vertex's metrics, so the graph needs no other request), and for the
  vertex panel ``/jobs/:jobid/vertices/:vid``, its ``/backpressure`` and
  ``/taskmanagers``.

Results: a table, and ``benchmarks/results/dashboard.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (
    BUILD_DIR,
    RESULTS_DIR,
    LocalCluster,
    engine_revision,
    format_table,
    machine_info,
    median,
    poll,
    write_json,
)
from tests.support.browser import chromium_missing, launch

BRANCHES = 4
#: The job page of the last load, with the vertex panel open.
SCREENSHOT = BUILD_DIR / "screenshots" / "bench-dashboard.png"
JOB = """
    import time

    from weir import DiscardingSink, StreamExecutionEnvironment

    VERTICES, PARALLELISM, BRANCHES = {vertices}, {parallelism}, {branches}

    def paced(n):
        time.sleep(0.1)  # about 10 records a second per subtask: an idle job
        return n

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(PARALLELISM)
    env.disable_operator_chaining()
    source = env.from_sequence(0, 10**9).name("numbers")
    maps = VERTICES - 2  # the source and the sink
    ends = []
    for branch in range(BRANCHES):
        stream = source
        for step in range(maps // BRANCHES + (branch < maps % BRANCHES)):
            stream = stream.map(paced if step == 0 else (lambda n: n)).name(
                f"branch {{branch}} step {{step}}")
        ends.append(stream)
    ends[0].union(*ends[1:]).sink_to(DiscardingSink()).name("discard")
    env.execute("dashboard benchmark")
"""


def get_timed(url: str) -> tuple[float, Any]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
    return time.perf_counter() - started, body


def measure(base: str, job_id: str, vertices: int, parallelism: int,
            loads: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    job = json.loads(get_timed(f"{base}/jobs/{job_id}")[1])
    vertex = job["vertices"][len(job["vertices"]) // 2]["id"]
    page_loads: list[float] = []
    panel_loads: list[float] = []
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = launch(playwright, Path(profile))
        try:
            for _ in range(loads):
                page = context.new_page()
                started = time.perf_counter()
                page.goto(f"{base}/#/jobs/{job_id}/graph")
                page.wait_for_function(
                    f"document.querySelectorAll('g.vertex').length === {vertices}",
                    polling="raf", timeout=60_000)
                page_loads.append(time.perf_counter() - started)
                started = time.perf_counter()
                page.evaluate(f"location.hash = '#/jobs/{job_id}/graph/{vertex}'")
                page.wait_for_function(
                    "document.querySelectorAll('table.subtasks tbody tr').length === "
                    f"{parallelism}", polling="raf", timeout=60_000)
                panel_loads.append(time.perf_counter() - started)
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOT), full_page=True)
                page.close()
        finally:
            context.close()
    rest: dict[str, float] = {}
    for name, path in (("/config", "/config"), ("/jobs/:jobid", f"/jobs/{job_id}"),
                       ("/jobs/:jobid/vertices/:vid", f"/jobs/{job_id}/vertices/{vertex}"),
                       (".../:vid/backpressure",
                        f"/jobs/{job_id}/vertices/{vertex}/backpressure"),
                       ("/taskmanagers", "/taskmanagers")):
        rest[name] = median([get_timed(base + path)[0] for _ in range(loads)])
    return {"job_page_s": page_loads, "vertex_panel_s": panel_loads, "rest_s": rest,
            "job_json_bytes": len(get_timed(f"{base}/jobs/{job_id}")[1])}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 loads")
    parser.add_argument("--loads", type=int, default=5, help="page loads (default 5)")
    parser.add_argument("--vertices", type=int, default=50)
    parser.add_argument("--parallelism", type=int, default=16)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "dashboard.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loads = 3 if args.quick else args.loads
    reason = chromium_missing()
    if reason is not None:
        print(f"bench_dashboard: skipped: {reason}")
        return 0
    work = BUILD_DIR / "bench-dashboard"
    work.mkdir(parents=True, exist_ok=True)
    program = work / "job.py"
    program.write_text(textwrap.dedent(JOB.format(vertices=args.vertices,
                                                  parallelism=args.parallelism,
                                                  branches=BRANCHES)))
    slots = (args.parallelism + 1) // 2
    with LocalCluster(work / "cluster", 2, slots) as cluster:
        result = cluster.weir("run", "--detached", str(program), timeout=300, check=True)
        job_id = result.stdout.strip().splitlines()[-1]
        base = cluster.status()["jobmaster"]["rest_url"]

        def running() -> bool:
            with urllib.request.urlopen(f"{base}/jobs/{job_id}", timeout=30) as response:
                job = json.loads(response.read())
            return job["state"] == "RUNNING" and all(v["status"] == "RUNNING"
                                                     for v in job["vertices"])

        started = time.perf_counter()
        poll(running, 600, interval=1, what=f"all {args.vertices * args.parallelism} "
                                             "subtasks to run")
        deploy_s = time.perf_counter() - started
        measured = measure(base, job_id, args.vertices, args.parallelism, loads)
    pages, panels = measured["job_page_s"], measured["vertex_panel_s"]
    rows = [["job page (graph drawn)", f"{median(pages) * 1000:.0f}",
             f"{max(pages) * 1000:.0f}", f"{pages[0] * 1000:.0f}"],
            ["vertex panel (subtask rows)", f"{median(panels) * 1000:.0f}",
             f"{max(panels) * 1000:.0f}", f"{panels[0] * 1000:.0f}"]]
    rows += [[f"REST {name}", f"{value * 1000:.1f}", "", ""]
             for name, value in measured["rest_s"].items()]
    print(f"{args.vertices} vertices x {args.parallelism} subtasks, {loads} loads "
          f"(all subtasks running {deploy_s:.0f} s after `weir run --detached` returned; "
          "/jobs/:jobid is "
          f"{measured['job_json_bytes'] / 1024:.0f} KiB)")
    print(format_table(["what", "median ms", "max ms", "first (cold) ms"], rows))
    target = median(pages) < 1.0
    print(f"target job page median < 1 s: {median(pages):.3f} s: "
          f"{'pass' if target else 'FAIL'}")
    write_json(args.output, {
        "benchmark": "dashboard", "machine": machine_info(), "engine": engine_revision(),
        "setup": {"vertices": args.vertices, "parallelism": args.parallelism,
                  "branches": BRANCHES, "taskexecutors": 2, "slots": slots, "loads": loads,
                  "deploy_s": deploy_s},
        "results": measured,
        "targets": {"job_page_median_s": {"value": median(pages), "target": "< 1.0",
                                          "pass": target}}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
