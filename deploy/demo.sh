#!/usr/bin/env bash
# `make demo`: a local cluster with S3 for checkpoints, a Spark-fed exactly-once job, a
# TaskExecutor killed mid-job, the job's recovery, a result check, the metrics endpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
WEIR=.venv/bin/weir
PY=.venv/bin/python
DIR=${WEIR_DEMO_DIR:-build/demo-cluster}
ROWS=${WEIR_DEMO_ROWS:-1200000}
OUT=${WEIR_DEMO_OUT:-$(pwd)/build/demo-output}

"$WEIR" cluster stop --dir "$DIR" >/dev/null 2>&1 || true
rm -rf "$OUT"
echo "== starting a local cluster: 1 JobMaster, 3 TaskExecutors with 2 slots each (started"
echo "   again if they die, as a Kubernetes deployment would), and an S3 server (SeaweedFS)"
echo "   for checkpoints"
"$WEIR" cluster start --dir "$DIR" --taskexecutors 3 --slots 2 --with-s3 --restart-taskexecutors
trap '"$WEIR" cluster stop --dir "$DIR" >/dev/null 2>&1 || true' EXIT

echo
echo "== running examples/clickstream.py: Spark prepares $ROWS click events, weir counts"
echo "   clicks per page into $OUT (exactly-once FileSink, a checkpoint every second)"
"$WEIR" run --dir "$DIR" -D restart-strategy.type=fixed-delay \
    -D restart-strategy.fixed-delay.attempts=3 -D restart-strategy.fixed-delay.delay=1s \
    examples/clickstream.py "$ROWS" "$OUT" &
JOB=$!

# Once the job has completed a checkpoint, SIGKILL a TaskExecutor that runs its tasks.
"$PY" deploy/kill_taskexecutor.py "$DIR" || true
wait "$JOB"
echo
echo "== the TaskExecutors afterwards: the killed one was started again, same resource id"
"$WEIR" cluster status --dir "$DIR" --json | "$PY" -c '
import json, sys
for te in json.load(sys.stdin)["taskexecutors"]:
    state = "registered" if te["registered"] else "not registered"
    print("  %s  pid %s  restarts %s  %s" % (te["resource_id"], te["pid"],
                                            te.get("restarts", 0), state))
'

echo
echo "== the job's checkpoints (weir checkpoints) and status"
JOB_ID=$("$WEIR" list --dir "$DIR" | awk 'NR==2 {print $1}')
"$WEIR" checkpoints --dir "$DIR" "$JOB_ID" | tail -n 6
"$WEIR" status --dir "$DIR" "$JOB_ID"

echo
echo "== Prometheus metrics (scrape these; 'weir cluster status --dir $DIR' lists them too)"
"$WEIR" cluster status --dir "$DIR" --json | "$PY" -c '
import json, sys, urllib.request
info = json.load(sys.stdin)
urls = [info["jobmaster"]["metrics_url"]] + [t["metrics_url"] for t in info["taskexecutors"]
                                            if t.get("registered")]
for url in urls:
    print("  " + url)
body = urllib.request.urlopen(urls[0], timeout=5).read().decode()
print("  from the JobMaster:")
for line in body.splitlines():
    if line.startswith(("weir_jobmaster_jobs{status=\"FINISHED\"", "weir_jobmaster_slots",
                        "weir_job_numRestarts", "weir_job_numberOfCompletedCheckpoints",
                        "weir_job_lastCheckpointDuration", "weir_job_lastCheckpointExternalPath")):
        print("    " + line)
'
echo
echo "== stopping the cluster"
"$WEIR" cluster stop --dir "$DIR"
trap - EXIT
