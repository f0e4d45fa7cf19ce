"""The pod-memory measurement (bench/pod_memory) counts a process and everything below it."""

from __future__ import annotations

from bench.pod_memory.process_tree import descendants


def test_descendants_are_the_root_and_every_process_below_it_and_nothing_else() -> None:
    # Given siding (10) with the JVM (11) and its Python daemon (12) and workers (13, 14),
    # beside another program (20) and its child (21)
    parents = {10: 1, 11: 10, 12: 11, 13: 12, 14: 12, 20: 1, 21: 20}
    # Then siding's tree is exactly its own processes
    assert sorted(descendants(10, parents)) == [10, 11, 12, 13, 14]
    assert descendants(14, parents) == [14]
    assert descendants(99, parents) == [99]  # gone: only itself, read as nothing
