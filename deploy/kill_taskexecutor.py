"""Part of `make demo`: wait until the running job completed a checkpoint, then SIGKILL a
TaskExecutor that runs its tasks — a real failure, which the job recovers from.

    python deploy/kill_taskexecutor.py CLUSTER_DIR
"""

import json
import os
import signal
import subprocess
import sys
import time

WEIR = [sys.executable, "-m", "weir"]
DIR = sys.argv[1]


def weir(*args: str) -> str:
    """A weir client command against the demo cluster (``--dir`` after the subcommand)."""
    split = 2 if args[0] == "cluster" else 1
    return subprocess.run([*WEIR, *args[:split], "--dir", DIR, *args[split:]],
                          capture_output=True, text=True, timeout=60).stdout


deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    jobs = [line.split()[0] for line in weir("list").splitlines()[1:] if "RUNNING" in line]
    if jobs:
        status = json.loads(weir("status", jobs[0], "--json") or "{}")
        if status.get("last_checkpoint"):
            busy = sorted({t["taskexecutor"] for t in status["tasks"] if t["taskexecutor"]})
            cluster = json.loads(weir("cluster", "status", "--json"))
            pids = {te["resource_id"]: te["pid"] for te in cluster["taskexecutors"]}
            victim = busy[0]
            os.kill(pids[victim], signal.SIGKILL)
            print(f"\n== killed TaskExecutor {victim} (pid {pids[victim]}, SIGKILL) after "
                  f"checkpoint {status['last_checkpoint']['id']} of job {jobs[0]}\n",
                  flush=True)
            sys.exit(0)
    time.sleep(0.2)
print("the job finished before a TaskExecutor could be killed", file=sys.stderr)
sys.exit(1)
