"""One HOL variant on whatever siding code is first on ``sys.path``: a before/after of two commits.

    # in a worktree of the old commit (with .jars linked), then in the new tree:
    PYTHONPATH=$TREE/src:$TREE python -m bench.hol_one grpc_defaults

Prints one ``RESULT {json}`` line: fast p50 / p99 with and without slow messages. Run the two
trees one after the other on an otherwise idle machine, ideally twice each, interleaved.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import siding
from bench.workloads import hol
from bench.workloads.context import BenchContext
from siding.devkit.broker import EmbeddedKafka
from siding.pipeline.driver.session import build_session


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "grpc_defaults"
    variant = next(v for v in hol.VARIANTS if v.name == name)
    work = Path(tempfile.mkdtemp(prefix="siding-hol-one-"))
    try:
        with EmbeddedKafka() as kafka:
            spark = build_session("local[2]", app_name="siding-hol-one")
            ctx = BenchContext(kafka.bootstrap, spark, work, 1.0)
            got = hol.measure_system(ctx, variant.system(), hol.MESSAGES, attempts_known=True)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "code": siding.__file__,
        "variant": name,
        "with_slow": [got["with_slow"]["fast_p50_ms"], got["with_slow"]["fast_p99_ms"]],
        "without_slow": [got["without_slow"]["fast_p50_ms"], got["without_slow"]["fast_p99_ms"]],
    }
    print("RESULT", json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
