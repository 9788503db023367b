#!/usr/bin/env bash
# `make demo`: a local cluster with S3 for checkpoints, a Spark-fed exactly-once job, a
# TaskExecutor killed mid-job, the job's recovery, a result check, the metrics endpoints.
# WEIR_DEMO_KEEP=1 leaves the cluster running at the end, to look at it (Prometheus, Grafana).
set -euo pipefail
cd "$(dirname "$0")/.."
WEIR=.venv/bin/weir
PY=.venv/bin/python
DIR=${WEIR_DEMO_DIR:-build/demo-cluster}
ROWS=${WEIR_DEMO_ROWS:-1200000}
OUT=${WEIR_DEMO_OUT:-$(pwd)/build/demo-output}
KEEP=${WEIR_DEMO_KEEP:-0}
case "$KEEP" in
    0|1) ;;
    *) echo "WEIR_DEMO_KEEP=$KEEP is not 0 or 1: set WEIR_DEMO_KEEP=1 to keep the cluster running" >&2
       exit 2 ;;
esac

"$WEIR" cluster stop --dir "$DIR" >/dev/null 2>&1 || true
rm -rf "$OUT" "$DIR/prometheus.yml"  # a kept run's scrape config names dead ports
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
# With WEIR_DEMO_KEEP=1 the endpoints outlive the demo: a scrape config for them is
# written next to the cluster, ready for `prometheus --config.file=...`.
SCRAPE_CONFIG=deploy/grafana/prometheus.yml
[ "$KEEP" = 1 ] && SCRAPE_CONFIG=$DIR/prometheus.yml
"$WEIR" cluster status --dir "$DIR" --json | "$PY" -c '
import json, sys, urllib.parse, urllib.request
info = json.load(sys.stdin)
keep, scrape_config = sys.argv[1] == "1", sys.argv[2]
jobmaster = info["jobmaster"]
urls = [jobmaster["metrics_url"]] + [t["metrics_url"] for t in info["taskexecutors"]
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
if keep:
    def target(url):
        return urllib.parse.urlsplit(url).netloc
    with open(scrape_config, "w") as out:
        out.write("# Scrapes the demo cluster (`make demo` with WEIR_DEMO_KEEP=1).\n"
                  "global:\n  scrape_interval: 10s\nscrape_configs:\n"
                  "  - job_name: weir-jobmaster\n    static_configs:\n"
                  "      - targets: [%s]\n" % json.dumps(target(urls[0])) +
                  "  - job_name: weir-taskexecutor\n    static_configs:\n"
                  "      - targets: [%s]\n" % ", ".join(json.dumps(target(u))
                                                      for u in urls[1:]))
print()
print("== where to look")
print("  Grafana dashboard:     deploy/grafana/weir-dashboard.json (import it: deploy/grafana/README.md)")
print("  Prometheus config:     " + scrape_config)
# The web dashboard at the root of the JobMaster REST API (Flink paths).
rest = jobmaster.get("rest_url")
if rest:
    print("  Web dashboard:         " + rest.rstrip("/") + "/")
    print("  REST API:              " + rest.rstrip("/") + "/overview")
' "$KEEP" "$SCRAPE_CONFIG"

echo
if [ "$KEEP" = 1 ]; then
    echo "== the cluster keeps running (WEIR_DEMO_KEEP=1); stop it with:"
    echo "   $WEIR cluster stop --dir $DIR"
    trap - EXIT
else
    echo "== stopping the cluster (WEIR_DEMO_KEEP=1 keeps it running)"
    "$WEIR" cluster stop --dir "$DIR"
    trap - EXIT
fi
