"""The checkpoint storage through Hadoop's FileSystem API in a real JVM, on ``file://`` (the
path ``hdfs://`` takes: a file written beside its target and renamed over it), and the offset
log and owner file written through it read back by the same code as local ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from siding.pipeline.offline import offset_log, owner
from siding.pipeline.offline.hadoop_fs import HadoopStorage
from siding.pipeline.offline.storage import Place


def test_hadoop_storage_replaces_lists_renames_and_deletes(tmp_path: Path) -> None:
    # Given a route folder reached through Hadoop's FileSystem (siding's own JVM: no Spark here)
    route = Place(HadoopStorage({}), f"file://{tmp_path}/ck/orders")
    assert not route.exists() and route.iterdir() == []
    # When siding's files are written, one twice, and a query's log entry beside them
    (route / "siding-move.json").replace("first")
    (route / "siding-move.json").replace("second")
    offset_log.write_batch(route / "main", 0, 'v1\n{}\n{"t":{"0":5}}', offset_log.FIRST_COMMIT)
    owner.claim(route, owner.Owner("orders", "t", "cluster-1"))
    # Then each reads back whole, through Hadoop and on the disk, and no temporary file stays
    assert (route / "siding-move.json").read_text() == "second"
    assert (tmp_path / "ck" / "orders" / "siding-move.json").read_text() == "second"
    assert not [p for p in (tmp_path / "ck" / "orders").iterdir() if p.name.endswith(".tmp")]
    assert owner.read_owner(route) == owner.Owner("orders", "t", "cluster-1")
    position = offset_log.read_position(route / "main")
    assert position is not None and position.offsets == {"t": {0: 5}}
    assert [p.name for p in route.folders()] == ["main"]
    # And a missing file is FileNotFoundError; renames and deletes go through
    (route / "siding-move.json").rename(route / "moved.json")
    (route / "moved.json").unlink()
    assert sorted(p.name for p in route.iterdir()) == ["main", "siding-owner.json"]
    with pytest.raises(FileNotFoundError, match=r"/ck/orders/moved\.json$"):
        (route / "moved.json").read_bytes()
