"""Following a receiver's record file as it grows, and the ids of a run's traffic."""

from __future__ import annotations

from pathlib import Path

from bench.workloads.traffic import RecordTail, traffic_ids, wait_received


def _never() -> None:
    return None


def test_the_tail_reads_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "record.csv"
    tail = RecordTail(path)
    tail.poll()  # no file yet
    assert tail.ids == set()
    path.write_text("t/0/1,1,10.0,9.9,1\nt/0/2,1,10.1,")
    tail.poll()
    assert tail.ids == {"t/0/1"}
    with path.open("a") as f:
        f.write("9.9,2\nt/0/3,2,10.2,9.9,3\n")
    tail.poll()
    assert tail.ids == {"t/0/1", "t/0/2", "t/0/3"}


def test_waiting_for_ids_ends_when_all_arrived_or_on_timeout(tmp_path: Path) -> None:
    path = tmp_path / "record.csv"
    path.write_text("t/0/1,1,10.0,9.9,1\n")
    assert wait_received(RecordTail(path), {"t/0/1"}, timeout_s=0.0, check=_never)
    assert not wait_received(RecordTail(path), {"t/0/1", "t/0/2"}, timeout_s=0.0, check=_never)


def test_the_warm_up_message_is_not_traffic() -> None:
    assert traffic_ids("t", 3) == {"t/0/1", "t/0/2", "t/0/3"}
