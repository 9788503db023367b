"""The JobMaster's REST API against a real local cluster with a running job: every read
endpoint's JSON (ids, parallelism, checkpoints as `weir status/checkpoints --json` show
them), authentication by the cluster token, JSON errors for bad paths and ids, and the
actions (savepoint with status polling, cancel, stop with a savepoint, rescale)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.cluster import poll
from tests.support.exactly_once import checkpoints, submit
from weir.jobmaster.rest.mapping import vertex_hex_id

TOKEN = "rest-api-test-token"
#: Given in the job's configuration; /jobs/:jobid/config must never show it.
SECRET = "rest-api-test-s3-secret"


def call(base: str, path: str, method: str = "GET", body: Any = None,
         token: str | None = TOKEN) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body) of one request; the body must be JSON."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def get(base: str, path: str) -> Any:
    status, body = call(base, path)
    assert status == 200, (path, body)
    return body


def operation(base: str, path: str, timeout: float = 120) -> Any:
    """Poll an asynchronous operation until it completed; returns its ``operation``."""
    def done() -> Any:
        result = get(base, path)
        return result["status"]["id"] == "COMPLETED" and result

    return poll(done, timeout, interval=0.2, what=f"the operation {path}")["operation"]


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster's daemons and every CLI call share the token (never on a command line)."""
    monkeypatch.setenv("WEIR_SECURITY_AUTH_TOKEN", TOKEN)


@pytest.fixture
def running_job(token_env: None, cluster_factory: Any, tmp_path: Path) -> Any:
    cluster = cluster_factory(2, 2)
    job_id = submit(cluster, tmp_path, tmp_path / "out", 10_000_000, config={
        "execution.checkpointing.interval": "300 ms", "state.backend.type": "rocksdb",
        "s3.secret-key": SECRET})
    base = cluster.status()["jobmaster"]["rest_url"]
    assert base.startswith("http://127.0.0.1:") and not base.endswith(":8081")

    def running_with_checkpoint() -> bool:
        job = get(base, f"/jobs/{job_id}")
        return job["state"] == "RUNNING" and all(v["status"] == "RUNNING"
                                                 for v in job["vertices"]) and \
            get(base, f"/jobs/{job_id}/checkpoints")["latest"]["completed"] is not None

    poll(running_with_checkpoint, 60, interval=0.1,
         what=f"job {job_id} to run with a completed checkpoint")
    return cluster, job_id, base


def wait_state(base: str, job_id: str, states: set[str], timeout: float) -> None:
    poll(lambda: get(base, f"/jobs/{job_id}")["state"] in states, timeout, interval=0.1,
         what=f"job {job_id} to reach {states}")


def test_reads_auth_errors_savepoint_and_cancel(running_job: Any, tmp_path: Path) -> None:
    cluster, job_id, base = running_job

    # Authentication: no token or a wrong one is refused with a JSON body and no data.
    for token in (None, "wrong-token"):
        status, body = call(base, "/jobs", token=token)
        assert status == 401 and list(body) == ["errors"] and job_id not in json.dumps(body)
    assert call(base, "/jobs")[0] == 200

    assert set(get(base, "/config")) >= {"refresh-interval", "flink-version", "features"}
    overview = get(base, "/overview")
    assert (overview["taskmanagers"], overview["slots-total"], overview["jobs-running"]) == \
        (2, 4, 1)
    assert {"id": job_id, "status": "RUNNING"} in get(base, "/jobs")["jobs"]
    [summary] = [j for j in get(base, "/jobs/overview")["jobs"] if j["jid"] == job_id]
    assert summary["state"] == "RUNNING" and summary["tasks"]["total"] > 0

    # The job and its vertices, as `weir status --json` shows them.
    status_cli = json.loads(cluster.weir("status", job_id, "--json", check=True).stdout)
    job = get(base, f"/jobs/{job_id}")
    assert (job["jid"], job["name"], job["state"]) == (job_id, status_cli["name"], "RUNNING")
    subtasks_cli: dict[str, int] = {}
    for task in status_cli["tasks"]:
        subtasks_cli[task["name"]] = subtasks_cli.get(task["name"], 0) + 1
    assert {v["name"]: v["parallelism"] for v in job["vertices"]} == subtasks_cli
    for vertex in job["vertices"]:
        assert vertex["id"] == vertex_hex_id(job_id, vertex["vertex-id"])
        assert vertex["status"] == "RUNNING" and vertex["tasks"]["RUNNING"] == \
            vertex["parallelism"]
    source = job["vertices"][0]
    poll(lambda: get(base, f"/jobs/{job_id}")["vertices"][0]["metrics"]["write-records"] > 0,
         30, interval=0.2, what="the source's write-records")
    plan_ids = [n["id"] for n in get(base, f"/jobs/{job_id}/plan")["plan"]["nodes"]]
    assert plan_ids == [v["id"] for v in job["vertices"]]
    exceptions = get(base, f"/jobs/{job_id}/exceptions")
    assert exceptions["root-exception"] is None and exceptions["timestamp"] is None
    # No restart yet: weir's recoveries are empty, here as in `weir status --json`.
    assert job["recoveries"] == [] == status_cli["recoveries"]

    # Vertex endpoints accept the 32-hex id and weir's int id alike.
    for vid in (source["id"], str(source["vertex-id"])):
        vertex = get(base, f"/jobs/{job_id}/vertices/{vid}")
        assert vertex["id"] == source["id"]
        assert len(vertex["subtasks"]) == source["parallelism"]
    backpressure = get(base, f"/jobs/{job_id}/vertices/{source['id']}/backpressure")
    assert backpressure["backpressure-level"] in ("ok", "low", "high")
    assert len(backpressure["subtasks"]) == source["parallelism"]
    # Watermarks: a source has no input watermark; each subtask of a vertex with inputs
    # reports one, and it advances (the job's event time is the number it reads).
    assert get(base, f"/jobs/{job_id}/vertices/{source['id']}/watermarks") == []
    keyed = job["vertices"][1]  # reads the source
    ids = [f"{i}.currentInputWatermark" for i in range(keyed["parallelism"])]

    def watermarks() -> dict[str, int]:
        found = get(base, f"/jobs/{job_id}/vertices/{keyed['id']}/watermarks")
        return {m["id"]: int(m["value"]) for m in found}

    first = poll(lambda: (w := watermarks()) and sorted(w) == ids
                 and min(w.values()) > 0 and w, 30, interval=0.2,
                 what="every subtask to report a watermark")
    poll(lambda: min(watermarks().values()) > max(first.values()), 30, interval=0.2,
         what="the subtasks' watermarks to advance")
    [metric] = get(base, f"/jobs/{job_id}/vertices/{keyed['id']}/metrics"
                         "?get=0.currentInputWatermark")
    assert int(metric["value"]) >= first["0.currentInputWatermark"]

    # When each subtask entered each state: RUNNING after the job started, before now.
    for vertex in job["vertices"]:
        times = get(base, f"/jobs/{job_id}/vertices/{vertex['id']}/subtasktimes")
        assert len(times["subtasks"]) == vertex["parallelism"]
        for sub in times["subtasks"]:
            stamps = sub["timestamps"]
            assert job["start-time"] <= stamps["SCHEDULED"] <= stamps["DEPLOYING"] <= \
                stamps["RUNNING"] <= times["now"], sub
            assert 0 < sub["duration"] <= times["now"] - job["start-time"], sub
        assert job["start-time"] <= vertex["start-time"] <= job["now"] and \
            vertex["end-time"] == -1 and vertex["duration"] > 0, vertex
        for sub in get(base, f"/jobs/{job_id}/vertices/{vertex['id']}")["subtasks"]:
            assert (sub["status"], sub["attempt"], sub["end-time"]) == ("RUNNING", 0, -1)
            assert vertex["start-time"] <= sub["start-time"] and sub["duration"] > 0, sub

    # The job's configuration, its secret hidden.
    status, config = call(base, f"/jobs/{job_id}/config")
    assert status == 200 and SECRET not in json.dumps(config), config
    execution = config["execution-config"]
    assert (config["jid"], execution["execution-mode"], execution["job-parallelism"]) == \
        (job_id, "PIPELINED", 2)
    assert execution["user-config"]["s3.secret-key"] == "******"
    assert execution["user-config"]["state.backend.type"] == "rocksdb"
    assert execution["restart-strategy"].startswith("Restart with exponential delay")
    [records] = get(base, f"/jobs/{job_id}/vertices/{source['id']}/metrics"
                          "?get=0.numRecordsOut")
    assert records["id"] == "0.numRecordsOut" and float(records["value"]) > 0
    # Aggregated over the subtasks (what Flink's dashboard and autoscaler read).
    [out] = get(base, f"/jobs/{job_id}/vertices/{source['id']}/subtasks/metrics"
                      "?get=numRecordsOut&agg=min,max,sum")
    assert out["id"] == "numRecordsOut" and 0 < out["min"] <= out["max"] < out["sum"], out
    status, refused = call(base, f"/jobs/{job_id}/vertices/{source['id']}/subtasks/metrics"
                                 "?get=numRecordsOut&agg=median")
    assert status == 400 and "median" in refused["errors"][0], refused
    assert {"id": "numRestarts", "value": "0"} in get(
        base, f"/jobs/{job_id}/metrics?get=numRestarts,nothing")

    # Checkpoints, as `weir checkpoints --json` lists them (taken first: the REST history
    # has those and maybe newer ones).
    cli = {c["id"]: c["status"] for c in checkpoints(cluster, job_id)}
    history = get(base, f"/jobs/{job_id}/checkpoints")
    rest = {c["id"]: c["status"] for c in history["history"]}
    completed_before = {i for i, s in cli.items() if s == "COMPLETED"}
    assert completed_before and all(rest[i] == "COMPLETED" for i in completed_before)
    assert history["counts"]["completed"] >= len(completed_before)
    latest = history["latest"]["completed"]
    assert latest["id"] == max(i for i, s in rest.items() if s == "COMPLETED")
    details = get(base, f"/jobs/{job_id}/checkpoints/details/{latest['id']}")
    assert details["status"] == "COMPLETED" and set(details["tasks"]) == set(plan_ids)
    subtasks = get(base, f"/jobs/{job_id}/checkpoints/details/{latest['id']}/subtasks/"
                         f"{source['vertex-id']}")
    assert [s["status"] for s in subtasks["subtasks"]] == ["completed"] * source["parallelism"]
    assert get(base, f"/jobs/{job_id}/checkpoints/config")["interval"] == 300

    [te] = get(base, "/taskmanagers")["taskmanagers"][:1]
    assert get(base, f"/taskmanagers/{te['id']}")["slotsNumber"] == 2
    tes = [get(base, f"/taskmanagers/{t['id']}") for t in get(base, "/taskmanagers")
           ["taskmanagers"]]
    assert all(0 < t["registered-at"] <= job["start-time"] for t in tes), tes
    assert [(t["registrations"], t["task-failures"]) for t in tes] == [(1, 0)] * 2
    assert sum(t["tasks-running"] for t in tes) == sum(v["parallelism"]
                                                       for v in job["vertices"])

    # Unknown paths and ids: 404 with Flink's error body; bad input 400; wrong method 405.
    for path in ("/jobs/" + "0" * 32, f"/jobs/{job_id}/vertices/999",
                 f"/jobs/{job_id}/vertices/{'f' * 32}/backpressure",
                 f"/jobs/{job_id}/vertices/{'f' * 32}/watermarks",
                 f"/jobs/{job_id}/vertices/999/subtasktimes", f"/jobs/{'0' * 32}/config",
                 f"/jobs/{job_id}/checkpoints/details/999999", "/taskmanagers/nobody",
                 "/nowhere", f"/jobs/{job_id}/savepoints/{'0' * 32}"):
        status, body = call(base, path)
        assert status == 404 and isinstance(body["errors"][0], str), (path, body)
    assert call(base, f"/jobs/{job_id}/checkpoints/details/latest")[0] == 400
    assert call(base, f"/jobs/{job_id}?mode=stop", method="PATCH")[0] == 400
    assert call(base, f"/jobs/{job_id}/savepoints", method="POST",
                body={"cancel-job": "yes"})[0] == 400
    assert call(base, "/jobs", method="DELETE")[0] == 405

    # A savepoint: triggered, polled, written where asked; the job keeps running.
    target = tmp_path / "savepoints"
    status, trigger = call(base, f"/jobs/{job_id}/savepoints", method="POST",
                           body={"target-directory": str(target), "cancel-job": False})
    assert status == 202
    result = operation(base, f"/jobs/{job_id}/savepoints/{trigger['request-id']}")
    location = result["location"]
    assert location.startswith(str(target)) or str(target) in location, result
    saved = get(base, f"/jobs/{job_id}/checkpoints")
    assert saved["latest"]["savepoint"]["external_path"] == location
    assert get(base, f"/jobs/{job_id}")["state"] == "RUNNING"

    # Flink's client sends formatType and triggerId: a NATIVE savepoint is native, and a
    # request repeated with its trigger id (a retry) is the same operation, not a second.
    given = "0f" * 16
    request = {"target-directory": (tmp_path / "native").as_uri(), "cancel-job": False,
               "formatType": "NATIVE", "triggerId": given}
    for _ in range(2):
        assert call(base, f"/jobs/{job_id}/savepoints", method="POST", body=request) == \
            (202, {"request-id": given})
    native = operation(base, f"/jobs/{job_id}/savepoints/{given}")["location"]
    # A native savepoint of RocksDB holds its SST files (under shared/); a canonical one
    # (the savepoint above) does not.
    native_dir = Path(urlsplit(native).path)
    assert list((tmp_path / "native").iterdir()) == [native_dir]
    assert list((native_dir / "shared").rglob("*.sst")), sorted(native_dir.rglob("*"))
    assert not list(Path(urlsplit(location).path).rglob("*.sst"))
    for bad in ({"formatType": "FULL"}, {"triggerId": "not-hex"}):
        status, body = call(base, f"/jobs/{job_id}/savepoints", method="POST", body=bad)
        assert status == 400 and next(iter(bad)) in body["errors"][0], body
    assert get(base, "/jobs/overview")["jobs"][0]["pending-operators"] == 0

    # Cancel.
    assert call(base, f"/jobs/{job_id}?mode=cancel", method="PATCH") == (202, {})
    wait_state(base, job_id, {"CANCELED"}, 60)
    status_cli = json.loads(cluster.weir("status", job_id, "--json", check=True).stdout)
    assert status_cli["status"] == "CANCELED"


@pytest.mark.extended
def test_stop_with_savepoint_and_rescale(running_job: Any, tmp_path: Path) -> None:
    cluster, job_id, base = running_job

    status, trigger = call(base, f"/jobs/{job_id}/rescaling?parallelism=3", method="PATCH")
    assert status == 202
    change = operation(base, f"/jobs/{job_id}/rescaling/{trigger['request-id']}", 180)
    assert change["kind"] == "rescale" and change["downtime"] >= 0, change
    job = get(base, f"/jobs/{job_id}")
    assert job["last-change"]["checkpoint-id"] == change["checkpoint-id"]
    assert {v["parallelism"] for v in job["vertices"]} == {3}
    status_cli = json.loads(cluster.weir("status", job_id, "--json", check=True).stdout)
    assert status_cli["last_change"]["checkpoint_id"] == change["checkpoint-id"]
    assert status_cli["last_change"]["downtime_ms"] == change["downtime"]

    status, trigger = call(base, f"/jobs/{job_id}/stop", method="POST",
                           body={"targetDirectory": str(tmp_path / "stopped")})
    assert status == 202
    result = operation(base, f"/jobs/{job_id}/savepoints/{trigger['request-id']}")
    assert str(tmp_path / "stopped") in result["location"]
    wait_state(base, job_id, {"FINISHED", "CANCELED"}, 120)
    final = get(base, f"/jobs/{job_id}")
    assert final["state"] in ("FINISHED", "CANCELED") and final["end-time"] > 0
