"""The stream of a batch's results (docs/batch.md, "Results as they finish"): lines cut from
chunks however they fall, and what each line says."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.model import OutcomeKind
from siding.transport.result_stream import (
    LineTooLong,
    ResultLines,
    is_result_stream,
    line_result,
)


@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_the_lines_come_out_whole_however_the_chunks_fall(
    lines: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(line + b"\n" for line in lines)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = ResultLines(limit=64)
    got: list[bytes] = []
    for start, end in itertools.pairwise(points):
        got += reader.feed(stream[start:end])
    assert got == lines
    assert reader.rest() == b""


def test_a_last_line_without_its_newline_is_kept_for_the_end() -> None:
    reader = ResultLines(limit=64)
    assert reader.feed(b'{"id":"a"}\n{"id"') == [b'{"id":"a"}']
    assert reader.feed(b':"b"}') == []
    assert reader.rest() == b'{"id":"b"}'


def test_a_line_longer_than_the_limit_is_refused_not_held() -> None:
    reader = ResultLines(limit=8)
    with pytest.raises(LineTooLong, match="over 8 bytes"):
        reader.feed(b"0123456789")
    with pytest.raises(LineTooLong):
        ResultLines(limit=8).feed(b"0123456789\nok\n")


def test_each_line_names_its_delivery_and_its_outcome() -> None:
    found = line_result(b'{"id":"t/0/1","verdict":"retry","after":3,"reason":"later"}')
    assert found is not None
    delivery_id, outcome = found
    assert delivery_id == "t/0/1"
    assert (outcome.kind, outcome.retry_after_s, outcome.reason) == (
        OutcomeKind.RETRY,
        3.0,
        "later",
    )
    dead = line_result(b' {"id":"t/0/2","verdict":"dead","reason":"bad"}\r')
    assert dead is not None and dead[1].kind is OutcomeKind.DEAD


@pytest.mark.parametrize(
    "line", [b"", b"   ", b"not json", b"[1,2]", b'{"verdict":"ack"}', b'{"id":7,"verdict":"ack"}']
)
def test_a_line_that_names_no_delivery_is_passed_over(line: bytes) -> None:
    assert line_result(line) is None


def test_an_unknown_verdict_is_a_retry_never_an_ack() -> None:
    found = line_result(b'{"id":"t/0/1","verdict":"maybe"}')
    assert found is not None and found[1].kind is OutcomeKind.RETRY


def test_the_stream_is_known_by_its_content_type() -> None:
    assert is_result_stream("application/x-ndjson")
    assert is_result_stream("Application/X-NDJSON; charset=utf-8")
    assert not is_result_stream("application/json")
    assert not is_result_stream(None)
