"""Key-mode parking on the driver: events from batches that end in any order."""

from __future__ import annotations

from siding.dispatch.keyorder import HELD, ParkEvent
from siding.pipeline.driver.keystate import KeyParking, decode_value

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


def test_a_record_held_again_unchanged_writes_nothing() -> None:
    # Given offset 12 is held behind 10 (in lane 1)
    parking = KeyParking("state")
    parking.apply([ParkEvent(KEY, 10, 1, 99), ParkEvent(KEY, 12, HELD)])
    # When the main lane reads it back and holds it again (10 is not done yet)
    written = parking.apply([ParkEvent(KEY, 12, HELD)])
    # Then the state is the same and no state record is written for it
    assert written == []
    assert [r.offset for r in parking.snapshot()[KEY]] == [10, 12]


def test_held_records_survive_a_restore_and_a_release_empties_the_key() -> None:
    parking = KeyParking("state")
    written = parking.apply([ParkEvent(KEY, 10, 1, 99), ParkEvent(KEY, 12, HELD)])
    restored = KeyParking("state")
    restored.restore((r.key or b"", r.value) for r in written)
    assert restored.snapshot() == parking.snapshot()
    assert {r.lane for r in restored.snapshot()[KEY]} == {1, HELD}
    tomb = restored.apply([ParkEvent(KEY, 10, None), ParkEvent(KEY, 12, None)])
    assert [r.value for r in tomb] == [None]
    assert restored.snapshot() == {}
