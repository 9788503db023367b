"""The container image (deploy/container/Containerfile) builds, both targets, and runs weir.

Needs a running container engine (docker, else podman): without one the tests skip and
say why. The static checks of the image definition run everywhere
(tests/unit/test_deploy_files.py).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.extended, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "deploy" / "container" / "Containerfile"
#: pip installs weir's dependencies (pyspark among them) from the network: minutes.
BUILD_TIMEOUT = 1800


def _engine() -> str:
    reasons = []
    for name in ("docker", "podman"):
        path = shutil.which(name)
        if path is None:
            reasons.append(f"{name} is not installed")
            continue
        out = subprocess.run([path, "info"], capture_output=True, text=True, timeout=60,
                             check=False)
        if out.returncode == 0:
            return path
        last = (out.stderr.strip().splitlines() or ["exit status " + str(out.returncode)])[-1]
        reasons.append(f"{name} info failed: {last}")
    pytest.skip("no container engine: " + "; ".join(reasons))


def _run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def engine() -> str:
    return _engine()


@pytest.fixture(scope="module")
def images(engine: str) -> Iterator[dict[str, str]]:
    tag = f"weir-test-{uuid.uuid4().hex[:8]}"
    built: dict[str, str] = {}
    try:
        for target in ("daemon", "client"):
            image = f"{tag}:{target}"
            out = _run(engine, "build", "-f", str(CONTAINERFILE), "--target", target,
                       "-t", image, str(REPO), timeout=BUILD_TIMEOUT)
            assert out.returncode == 0, f"building {target} failed:\n{out.stderr[-4000:]}"
            built[target] = image
        yield built
    finally:
        for image in built.values():
            _run(engine, "rmi", "-f", image)


@pytest.mark.parametrize("target", ["daemon", "client"])
def test_the_image_runs_weir_as_an_unprivileged_user(engine: str, images: dict[str, str],
                                                     target: str):
    out = _run(engine, "run", "--rm", images[target], "taskexecutor", "--help")
    assert out.returncode == 0, out.stderr
    assert "--jobmaster" in out.stdout
    out = _run(engine, "run", "--rm", "--entrypoint", "id", images[target], "-u")
    assert out.stdout.strip() == "10001"


def test_only_the_client_image_has_java_17(engine: str, images: dict[str, str]):
    out = _run(engine, "run", "--rm", "--entrypoint", "java", images["client"], "-version")
    assert out.returncode == 0 and 'version "17' in out.stderr, out.stderr
    out = _run(engine, "run", "--rm", "--entrypoint", "sh", images["daemon"], "-c",
               "command -v java || echo none")
    assert out.stdout.strip() == "none"


def test_the_client_image_runs_spark(engine: str, images: dict[str, str]):
    # from_spark() starts a local Spark session in the client: the JVM must start there.
    code = ("from pyspark.sql import SparkSession; "
            "s = SparkSession.builder.master('local[1]').getOrCreate(); "
            "print(s.range(5).count()); s.stop()")
    out = _run(engine, "run", "--rm", "--entrypoint", "python", images["client"], "-c", code,
               timeout=300)
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == "5", out.stderr


def test_a_jobmaster_starts_on_a_read_only_root_and_stops_on_sigterm(
        engine: str, images: dict[str, str]):
    # As deploy/kubernetes runs it: read-only root, writable /tmp and /var/lib/weir.
    name = f"weir-test-jm-{uuid.uuid4().hex[:8]}"
    out = _run(engine, "run", "-d", "--name", name, "--read-only",
               "--tmpfs", "/tmp", "--tmpfs", "/var/lib/weir:uid=10001,gid=10001,mode=0700",
               images["daemon"], "jobmaster", "-D", "jobmaster.rpc.port=0",
               "-D", "metrics.reporter.prom.port=0")
    assert out.returncode == 0, out.stderr
    try:
        deadline, logs = time.monotonic() + 90, ""
        while "JobMaster listening" not in logs:
            assert time.monotonic() < deadline, f"the JobMaster did not start:\n{logs}"
            logs = _run(engine, "logs", name).stderr
            time.sleep(0.5)  # polling the container's log, bounded by the deadline
        assert _run(engine, "stop", "-t", "30", name, timeout=60).returncode == 0
        status = _run(engine, "inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        assert status == "0", _run(engine, "logs", name).stderr
    finally:
        _run(engine, "rm", "-f", name)
