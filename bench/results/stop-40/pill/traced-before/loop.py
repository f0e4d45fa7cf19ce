"""Run the crash-pill workload's with-pill half N times on one broker and one Spark session;
one JSON line per run (deaths, the conviction's tally, the pill's receipts)."""
import json, shutil, sys, tempfile, time, logging
from pathlib import Path
from bench.workloads import crash_pill
from bench.workloads.context import BenchContext
from siding.devkit.broker import EmbeddedKafka
from siding.pipeline.driver.session import build_session

logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
n = int(sys.argv[1])
out = Path(sys.argv[2])
workdir = Path(tempfile.mkdtemp(prefix="siding-pill4-"))
try:
    with EmbeddedKafka() as kafka:
        spark = build_session("local[2]", app_name="siding-pill4")
        ctx = BenchContext(kafka.bootstrap, spark, workdir, 1.0)
        if "--hol" in sys.argv:
            from bench.workloads import hol
            print("[loop] hol", file=sys.stderr, flush=True)
            hol.run(ctx)
        for i in range(n):
            print(f"[loop] run {i} at {time.time():.3f}", file=sys.stderr, flush=True)
            got = crash_pill._run(ctx, crash_pill.MESSAGES, crash_pill.MESSAGES // 3)
            got.pop("timeline", None) and None
            line = {"run": i, **{k: v for k, v in got.items()}}
            print(f"[loop] result {json.dumps(line)}", file=sys.stderr, flush=True)
            with out.open("a") as f:
                f.write(json.dumps(line) + "\n")
        spark.stop()
finally:
    shutil.rmtree(workdir, ignore_errors=True)
