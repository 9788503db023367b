"""Secrets stay off command lines: any local user can read /proc/PID/cmdline."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.cluster import weir_cli, write_job

TOKEN = "tok-8f3a1c-never-on-argv"

JOB = """
    from weir import StreamExecutionEnvironment
    env = StreamExecutionEnvironment.get_execution_environment()
    env.from_collection([1, 2, 3]).map(lambda n: n * 2).print()
    env.execute("guarded")
"""


def command_lines(cluster) -> dict[int, str]:
    status = cluster.status()
    pids = [status["jobmaster"]["pid"], *(te["pid"] for te in status["taskexecutors"])]
    return {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            for pid in pids}


def test_the_cluster_token_is_not_on_any_daemon_command_line(cluster_factory, tmp_path):
    cluster = cluster_factory(2, 1, f"security.auth.token={TOKEN}")
    lines = command_lines(cluster)
    assert len(lines) == 3
    for pid, line in lines.items():
        assert TOKEN not in line, f"process {pid} shows the token: {line}"
        assert "jobmaster" in line or "taskexecutor" in line
    # the daemons still got it: a client with the token in its environment is served
    job = write_job(tmp_path, JOB)
    env = {"WEIR_SECURITY_AUTH_TOKEN": TOKEN}
    ran = weir_cli("run", "--dir", str(cluster.dir), str(job), env=env)
    assert ran.returncode == 0, ran.stderr
    refused = weir_cli("list", "--dir", str(cluster.dir))
    assert refused.returncode == 2
    assert "WEIR_SECURITY_AUTH_TOKEN" in refused.stderr
    assert "-D security.auth.token" not in refused.stderr     # no hint to put it on argv
    assert "Traceback" not in refused.stderr


def test_a_token_file_only_its_owner_can_read(cluster_factory, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    cluster = cluster_factory(1, 1, f"security.auth.token-file={token_file}")
    for line in command_lines(cluster).values():
        assert TOKEN not in line
    listing = weir_cli("list", "--dir", str(cluster.dir),
                       "-D", f"security.auth.token-file={token_file}")
    assert listing.returncode == 0, listing.stderr
    assert weir_cli("list", "--dir", str(cluster.dir)).returncode == 2   # the file is needed

    os.chmod(token_file, 0o644)
    exposed = weir_cli("list", "--dir", str(cluster.dir),
                       "-D", f"security.auth.token-file={token_file}")
    assert exposed.returncode == 2
    assert str(token_file) in exposed.stderr and "chmod 600" in exposed.stderr
    assert "Traceback" not in exposed.stderr
    missing = weir_cli("list", "--dir", str(cluster.dir),
                       "-D", f"security.auth.token-file={tmp_path / 'nope'}")
    assert missing.returncode == 2 and "cannot be read" in missing.stderr
