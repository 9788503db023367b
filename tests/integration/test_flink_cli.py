"""Flink's own command-line client against weir's JobMaster: PyPI's ``apache-flink`` (its
jars and the ``flink`` launcher) in a virtualenv of its own under build/, and its
``flink list``, ``savepoint``, ``cancel`` and ``stop --savepointPath`` against a local
cluster's REST API, unchanged.

The CLI reaches the REST API through a recording pass-through, so that the test also pins
which requests each command sends. It is skipped with the reason when Java or the package
is missing (no network to install it).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.cluster import REPO, LocalCluster, job_details, poll
from tests.support.exactly_once import status_name, submit

pytestmark = pytest.mark.slow

#: The newest apache-flink whose wheels install on this Python; it bundles Flink's jars.
FLINK_VERSION = "2.3.0"
#: The cached client: reused while its ``installed`` marker names FLINK_VERSION.
CLI_VENV = REPO / "build" / "flink-cli"
#: One command's deadline: the JVM's start and a savepoint of a small job.
COMMAND_TIMEOUT_S = 180


def _java_home() -> Path:
    """A Java installation for the launcher: JAVA_HOME, else the ``java`` on PATH; skips
    the module when there is none."""
    if os.environ.get("JAVA_HOME") and (Path(os.environ["JAVA_HOME"]) / "bin/java").exists():
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    if java is None:
        pytest.skip("Flink's CLI needs Java (11 or newer): no JAVA_HOME and no java on PATH")
    return Path(java).resolve().parent.parent


def _install_cli() -> Path:
    """The ``flink`` launcher, installing apache-flink into CLI_VENV unless it is there.
    Only the two packages: the launcher needs their jars and scripts, not PyFlink's Python
    dependencies. Skips when pip cannot install them (no network)."""
    marker = CLI_VENV / "installed"
    site = CLI_VENV / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages"
    launcher = site / "pyflink" / "bin" / "flink"
    if marker.exists() and marker.read_text().strip() == FLINK_VERSION and launcher.exists():
        return launcher
    # A half-made one (an interrupted install) is started again.
    shutil.rmtree(CLI_VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(CLI_VENV)], check=True)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(CLI_VENV / "bin" / "python"), "install",
         "--quiet", "--no-deps", f"apache-flink=={FLINK_VERSION}",
         f"apache-flink-libraries=={FLINK_VERSION}"],
        capture_output=True, text=True, timeout=1200, check=False)
    if result.returncode != 0 or not launcher.exists():
        shutil.rmtree(CLI_VENV, ignore_errors=True)
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot install apache-flink=={FLINK_VERSION} (no network?): {last}")
    marker.write_text(FLINK_VERSION + "\n")
    return launcher


class RecordingProxy:
    """Passes every request on to ``target`` (an http:// URL) unchanged and records
    (method, path, status) of each; serves on 127.0.0.1 at ``port`` until ``close``."""

    def __init__(self, target: str) -> None:
        upstream = urlsplit(target)
        self.requests: list[tuple[str, str, int]] = []
        lock = threading.Lock()
        recorded = self.requests

        class Forward(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(upstream.hostname or "", upstream.port,
                                                  timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("host", "connection")}
                    conn.request(self.command, self.path, body, headers)
                    response = conn.getresponse()
                    data = response.read()
                finally:
                    conn.close()
                with lock:
                    recorded.append((self.command, self.path, response.status))
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("connection", "transfer-encoding", "server",
                                           "date"):
                        self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _forward  # noqa: N815 - http.server's names

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def take(self) -> list[tuple[str, str, int]]:
        """The requests recorded since the last ``take``."""
        taken = list(self.requests)
        self.requests.clear()
        return taken

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class FlinkCli:
    """Runs ``flink ACTION ...`` with a FLINK_CONF_DIR whose config.yaml points
    ``rest.address``/``rest.port`` at the cluster (through the recording proxy)."""

    def __init__(self, launcher: Path, java_home: Path, conf_dir: Path, log_dir: Path,
                 proxy: RecordingProxy) -> None:
        self.launcher = launcher
        self.proxy = proxy
        conf_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(launcher.parent.parent / "conf" / "log4j-cli.properties", conf_dir)
        # No retries: a refused request fails the command at once, with Flink's error.
        (conf_dir / "config.yaml").write_text(
            f"rest.address: 127.0.0.1\nrest.port: {proxy.port}\n"
            "rest.retry.max-attempts: 0\n")
        self.env = {**os.environ, "JAVA_HOME": str(java_home),
                    "FLINK_CONF_DIR": str(conf_dir), "FLINK_LOG_DIR": str(log_dir)}

    def run(self, *args: str, env: dict[str, str] | None = None
            ) -> tuple[subprocess.CompletedProcess[str], list[tuple[str, str, int]]]:
        """What the command did (not checked) and the requests it sent; ``env`` adds to the
        command's environment."""
        result = subprocess.run([str(self.launcher), *args], env={**self.env, **(env or {})},
                                capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                                check=False)
        return result, self.proxy.take()

    def __call__(self, *args: str) -> tuple[str, list[tuple[str, str, int]]]:
        """The command's output (it must succeed) and the requests it sent."""
        result, sent = self.run(*args)
        assert result.returncode == 0, (args, sent, result.stdout[-4000:],
                                        result.stderr[-4000:])
        return result.stdout, sent


@pytest.fixture(scope="module")
def flink_launcher() -> tuple[Path, Path]:
    """The launcher and a JAVA_HOME (Java is looked for first: without it there is no
    point in downloading Flink)."""
    java_home = _java_home()
    return _install_cli(), java_home


@pytest.fixture
def flink(request: pytest.FixtureRequest, flink_launcher: tuple[Path, Path],
          cluster_factory: Any, tmp_path: Path) -> Iterator[tuple[LocalCluster, FlinkCli]]:
    """A local cluster and the CLI pointed at it; a test parametrized indirectly passes
    more ``cluster start`` options."""
    cluster = cluster_factory(2, 2, *getattr(request, "param", ()))
    proxy = RecordingProxy(cluster.status()["jobmaster"]["rest_url"])
    try:
        yield cluster, FlinkCli(*flink_launcher, tmp_path / "flink-conf", tmp_path / "flink-log",
                                proxy)
    finally:
        proxy.close()


def _running(cluster: LocalCluster, tmp_path: Path, *run_args: str) -> str:
    """A long job (the exactly-once job over 10 million records, throttled, on RocksDB)
    started with ``run_args``, once it runs and completed a checkpoint. Its sink's name
    holds the output directory: a resumed run writes to the same one, so that the
    savepoint's state maps."""
    job_id = submit(cluster, tmp_path, tmp_path / "out", 10_000_000, run_args=run_args,
                    config={"execution.checkpointing.interval": "300 ms",
                            "state.backend.type": "rocksdb",
                            "state.checkpoints.dir": (tmp_path / "checkpoints").as_uri()})
    poll(lambda: (d := job_details(cluster, job_id)).last_checkpoint_id > 0 and
         status_name(d) == "RUNNING", 90, interval=0.2,
         what=f"job {job_id} to run with a completed checkpoint")
    return job_id


def _weir_status(cluster: LocalCluster, job_id: str) -> dict[str, Any]:
    result = cluster.weir("status", job_id, "--json", check=True)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _wait_status(cluster: LocalCluster, job_id: str, status: str) -> dict[str, Any]:
    return poll(lambda: (s := _weir_status(cluster, job_id))["status"] == status and s, 60,
                interval=0.2, what=f"job {job_id} to be {status}")


def _latest_savepoint(cluster: LocalCluster, job_id: str) -> dict[str, Any]:
    """The job's latest savepoint as the REST API lists it (``id``, ``external_path``)."""
    url = cluster.status()["jobmaster"]["rest_url"] + f"/jobs/{job_id}/checkpoints"
    with urllib.request.urlopen(url, timeout=30) as response:
        latest = json.loads(response.read())["latest"]["savepoint"]
    assert latest is not None, f"job {job_id} has no savepoint"
    return latest  # type: ignore[no-any-return]


def _savepoint_path(output: str) -> Path:
    """The savepoint the command printed (``Savepoint completed. Path: file:///...``), as a
    local directory that holds its metadata."""
    match = re.search(r"Savepoint completed\. Path: (\S+)", output)
    assert match, output
    uri = match.group(1)
    assert uri.startswith("file://"), uri
    path = Path(urlsplit(uri).path)
    assert (path / "_metadata").is_file(), f"{uri} has no _metadata"
    return path


def test_flink_list_savepoint_cancel_and_stop(flink: tuple[LocalCluster, FlinkCli],
                                              tmp_path: Path) -> None:
    cluster, cli = flink
    job_id = _running(cluster, tmp_path)
    name = _weir_status(cluster, job_id)["name"]

    # flink list, with -m as well as with the config file's rest.address/rest.port.
    for args in (("list",), ("list", "-m", f"127.0.0.1:{cli.proxy.port}")):
        output, sent = cli(*args)
        assert f" : {job_id} : {name} (RUNNING)" in output, output
        assert ("GET", "/v1/jobs/overview", 200) in sent, sent

    # flink savepoint: prints the path; the savepoint is there and the job runs on.
    output, sent = cli("savepoint", job_id, (tmp_path / "savepoints").as_uri())
    savepoint = _savepoint_path(output)
    assert savepoint.parent == tmp_path / "savepoints"
    taken = _latest_savepoint(cluster, job_id)
    assert Path(urlsplit(taken["external_path"]).path) == savepoint, taken
    assert ("POST", f"/v1/jobs/{job_id}/savepoints", 202) in sent, sent
    assert any(m == "GET" and p.startswith(f"/v1/jobs/{job_id}/savepoints/") and s == 200
               for m, p, s in sent), sent
    assert _weir_status(cluster, job_id)["status"] == "RUNNING"
    # --type native: RocksDB's own files (under shared/), which a canonical one lacks.
    output, _ = cli("savepoint", "--type", "native", job_id, (tmp_path / "native").as_uri())
    assert list((_savepoint_path(output) / "shared").rglob("*.sst")), output
    assert not list(savepoint.rglob("*.sst"))

    # flink cancel: the job ends CANCELED.
    output, sent = cli("cancel", job_id)
    assert f"Cancelled job {job_id}" in output, output
    assert ("PATCH", f"/v1/jobs/{job_id}?mode=cancel", 202) in sent, sent
    _wait_status(cluster, job_id, "CANCELED")

    # The savepoint restores with `weir run -s`.
    resumed = _running(cluster, tmp_path, "-s", savepoint.as_uri())
    restore = _weir_status(cluster, resumed)["last_restore"]
    assert restore is not None and restore["checkpoint_id"] == taken["id"], restore

    # flink stop --savepointPath: the job ends with a savepoint.
    output, sent = cli("stop", "--savepointPath", (tmp_path / "stopped").as_uri(), resumed)
    stopped = _savepoint_path(output)
    assert stopped.parent == tmp_path / "stopped"
    last = _latest_savepoint(cluster, resumed)
    assert Path(urlsplit(last["external_path"]).path) == stopped, last
    assert ("POST", f"/v1/jobs/{resumed}/stop", 202) in sent, sent
    final = _wait_status(cluster, resumed, "FINISHED")
    assert final["failure"] is None, final


TOKEN = "flink-cli-token"


@pytest.mark.parametrize("flink", [(f"security.auth.token={TOKEN}",)], indirect=True)
def test_flink_cli_sends_the_token_from_its_header_variable(
        flink: tuple[LocalCluster, FlinkCli]) -> None:
    """With ``security.auth.token`` set the API refuses Flink's client until it sends the
    token, which it does through FLINK_REST_CLIENT_HEADERS (its custom-headers variable)."""
    _, cli = flink
    refused, sent = cli.run("list")
    assert refused.returncode != 0, refused.stdout
    assert ("GET", "/v1/jobs/overview", 401) in sent, sent

    allowed, sent = cli.run("list", env={
        "FLINK_REST_CLIENT_HEADERS": f"Authorization:Bearer {TOKEN}"})
    assert allowed.returncode == 0, (sent, allowed.stdout[-2000:], allowed.stderr[-2000:])
    assert "No running jobs." in allowed.stdout, allowed.stdout
    assert ("GET", "/v1/jobs/overview", 200) in sent, sent
