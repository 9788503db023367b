#!/usr/bin/env bash
# `make demo`: a local cluster, a Spark-fed job, a result summary, the metrics endpoints.
set -euo pipefail
cd "$(dirname "$0")/.."
WEIR=.venv/bin/weir
PY=.venv/bin/python
DIR=${WEIR_DEMO_DIR:-build/demo-cluster}
ROWS=${WEIR_DEMO_ROWS:-1200000}

"$WEIR" cluster stop --dir "$DIR" >/dev/null 2>&1 || true
echo "== starting a local cluster: 1 JobMaster, 2 TaskExecutors with 2 slots each"
"$WEIR" cluster start --dir "$DIR" --taskexecutors 2 --slots 2
trap '"$WEIR" cluster stop --dir "$DIR" >/dev/null 2>&1 || true' EXIT

echo
echo "== running examples/clickstream.py: Spark prepares $ROWS click events, weir counts them"
"$WEIR" run --dir "$DIR" examples/clickstream.py "$ROWS"

echo
echo "== Prometheus metrics (scrape these; 'weir cluster status --dir $DIR' lists them too)"
"$WEIR" cluster status --dir "$DIR" --json | "$PY" -c '
import json, sys, urllib.request
info = json.load(sys.stdin)
urls = [info["jobmaster"]["metrics_url"]] + [t["metrics_url"] for t in info["taskexecutors"]]
for url in urls:
    print("  " + url)
body = urllib.request.urlopen(urls[0], timeout=5).read().decode()
print("  from the JobMaster:")
for line in body.splitlines():
    if line.startswith(("weir_jobmaster_jobs{", "weir_jobmaster_slots", "weir_jobmaster_taskexecutors")):
        print("    " + line)
'
echo
echo "== stopping the cluster"
"$WEIR" cluster stop --dir "$DIR"
trap - EXIT
