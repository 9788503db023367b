"""The hosts of the cluster tests share nothing but the network: each one's /tmp, HOME and
working directory are its own disk, kept across a restart of the host and empty on a new
one; daemons listen on the host's own address; a killed host leaves no process behind."""

from __future__ import annotations

import json
import os

from tests.support.host_exec import code_roots

#: The top-level names in /tmp of code bound back onto every host (a checkout under /tmp).
CODE = {root.parts[2] for root in code_roots()}

# Writes /tmp/mark (and a file in HOME and in the working directory), then reports what
# it sees.
SHOW = """
import json, os, pathlib
for name in ("/tmp/mark", os.path.expanduser("~/home-mark"), "cwd-mark"):
    pathlib.Path(name).write_text(os.environ["MARK"])
print(json.dumps([os.getcwd(), os.environ["HOME"], sorted(os.listdir("/tmp"))]))
"""


def test_each_host_has_its_own_tmp_home_and_working_directory(hosts):
    first, second = hosts.new("first"), hosts.new("second")
    assert (first.address, second.address) == ("127.0.0.2", "127.0.0.3")
    for host in (first, second):
        result = host.python(SHOW, env={"MARK": host.name})
        assert result.returncode == 0, result.stderr
        cwd, home, listing = json.loads(result.stdout)
        assert (cwd, home) == ("/tmp/work", "/tmp/home")
        assert [n for n in listing if n not in CODE] == ["home", "mark", "work"], listing
        for inside in ("/tmp/mark", "/tmp/home/home-mark", "/tmp/work/cwd-mark"):
            assert host.path(inside).read_text() == host.name
    # Nothing reached the test machine's own /tmp.
    assert not os.path.exists("/tmp/work/cwd-mark")


def test_a_restarted_host_keeps_its_disk_and_a_new_one_starts_empty(hosts):
    host = hosts.new("keeper")
    assert host.python(SHOW, env={"MARK": "kept"}).returncode == 0
    host.restart()
    again = host.python("print(open('/tmp/mark').read())")
    assert again.stdout.strip() == "kept", again.stderr
    fresh = hosts.new("fresh").python("import os; print(os.path.exists('/tmp/mark'))")
    assert fresh.stdout.strip() == "False", fresh.stderr


def test_daemons_listen_on_their_hosts_address_and_a_kill_leaves_no_process(hosts):
    jobmaster = hosts.new("jobmaster")
    address = jobmaster.start_jobmaster()
    assert address.startswith(f"{jobmaster.address}:")
    worker = hosts.new("worker")
    worker.start_taskexecutor(address)
    [info] = worker.taskexecutors()
    assert info.address.startswith(f"{worker.address}:")
    assert info.data_address.startswith(f"{worker.address}:")
    assert info.metrics_url.startswith(f"http://{worker.address}:")
    # Its info file and log are on its own disk only.
    assert worker.path("/tmp/weir/taskexecutor-0.json").exists()
    assert not jobmaster.path("/tmp/weir/taskexecutor-0.json").exists()
    pids = [p.pid for p in worker.alive()]
    worker.kill()
    assert not worker.alive()
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
