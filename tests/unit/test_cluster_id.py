"""The embedded broker's KRaft cluster id never starts with "-" (the storage tool would read it as
an option: `siding dev kafka` and `make demo` failed about once in 64 starts)."""

from __future__ import annotations

import base64

from siding.devkit.broker import new_cluster_id

DASH_FIRST = bytes([0xF8]) + bytes(15)  # base64 of a first byte 0b111110xx starts with "-"


def test_an_id_that_would_start_with_a_dash_is_drawn_again() -> None:
    assert base64.urlsafe_b64encode(DASH_FIRST).decode().startswith("-")
    draws = iter([DASH_FIRST, DASH_FIRST, bytes(range(16))])
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == base64.urlsafe_b64encode(bytes(range(16))).decode().rstrip("=")


def test_ids_are_22_characters_of_url_safe_base64() -> None:
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
