#!/bin/bash
# crashrun.sh TREE NAME : one crash_pill run of TREE with its own venv, the driver's log at INFO
# (siding.batches at DEBUG), results in stop-38/crash/NAME (with the consumer's record files,
# one line per receipt), the log in NAME.log, start/end and load in runs.txt. Run it under
# `/work/heavy-run --all`.
set -u
TREE=$1; NAME=$2
OUT=$(cd "$(dirname "$0")" && pwd)
cd "$TREE"
export PYTHONPATH=$TREE/src:$TREE/sdk/python/src:$TREE
echo "$(date -u +%FT%TZ) start $NAME $(git -C "$TREE" rev-parse --short HEAD) load: $(cat /proc/loadavg)" >> "$OUT/runs.txt"
"$TREE/.venv/bin/python" - "$OUT/$NAME" > "$OUT/$NAME.log" 2>&1 <<'PY'
import logging, pathlib, shutil, sys
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
logging.getLogger("siding.batches").setLevel(logging.DEBUG)
import bench.run as run
out = pathlib.Path(sys.argv[1])
remove = shutil.rmtree
def keep_records(path, *args, **kwargs):
    (out / "records").mkdir(parents=True, exist_ok=True)
    for f in pathlib.Path(path).glob("*.csv"):
        shutil.copy(f, out / "records" / f.name)
    remove(path, *args, **kwargs)
run.shutil.rmtree = keep_records
sys.exit(run.main(["--only", "crash_pill", "--out", str(out)]))
PY
rc=$?
echo "$(date -u +%FT%TZ) end $NAME rc=$rc load: $(cat /proc/loadavg)" >> "$OUT/runs.txt"
