#!/bin/bash
# crashrun.sh TREE NAME : one crash_pill run of TREE, INFO log, results in stop-36/crash/NAME
set -u
TREE=$1; NAME=$2
OUT=$(cd "$(dirname "$0")" && pwd)
cd $TREE
export PYTHONPATH=$TREE/src:$TREE/sdk/python/src:$TREE
echo "$(date -u +%FT%TZ) start $NAME $(git -C $TREE rev-parse --short HEAD) load: $(cat /proc/loadavg)" >> $OUT/runs.txt
/work/main/.venv/bin/python -c 'import logging,sys; logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"); logging.getLogger("siding.batches").setLevel(logging.DEBUG); from bench.run import main; sys.exit(main(["--only","crash_pill","--out",sys.argv[1]]))' $OUT/$NAME > $OUT/$NAME.log 2>&1
echo "$(date -u +%FT%TZ) end $NAME rc=$? load: $(cat /proc/loadavg)" >> $OUT/runs.txt
