"""Key-mode parking on the driver: events from batches that end in any order."""

from __future__ import annotations

from siding.pipeline.keystate import KeyParking, ParkEvent, decode_value

KEY = (0, b"k")


def test_a_release_that_arrives_before_its_park_does_not_leave_the_key_parked() -> None:
    # Given lane 1 finished offsets 10 and 11 before the main-lane batch that parked them ended
    parking = KeyParking("state")
    parking.apply([ParkEvent(KEY, 10, None), ParkEvent(KEY, 11, None)])
    # When that main-lane batch's park events arrive afterwards
    parking.apply([ParkEvent(KEY, 10, 1, 5), ParkEvent(KEY, 11, 1, 5)])
    # Then nothing of the key is parked (later records of the key are not stuck behind it)
    assert parking.snapshot() == {}


def test_park_then_release_in_order_writes_the_state_and_then_a_tombstone() -> None:
    parking = KeyParking("state")
    written = parking.apply([ParkEvent(KEY, 10, 2, 99)])
    assert [decode_value(r.value) for r in written] == [{10: parking.snapshot()[KEY][0]}]
    released = parking.apply([ParkEvent(KEY, 10, None)])
    assert [r.value for r in released] == [None]
    assert parking.snapshot() == {}
