"""Key mode's waiting records on the driver: events from batches that end in any order."""

from __future__ import annotations

from siding.dispatch.keyorder import HELD, WaitEvent
from siding.pipeline.driver.keystate import KeyWaits, decode_value

KEY = (0, b"k")


def test_a_release_that_arrives_before_its_wait_does_not_leave_the_key_waiting() -> None:
    # Given lane 1 finished offsets 10 and 11 before the main-lane batch that sent them there ended
    waits = KeyWaits("state")
    waits.apply([WaitEvent(KEY, 10, None), WaitEvent(KEY, 11, None)])
    # When that main-lane batch's wait events arrive afterwards
    waits.apply([WaitEvent(KEY, 10, 1, 5), WaitEvent(KEY, 11, 1, 5)])
    # Then nothing of the key is waiting (later records of the key are not stuck behind it)
    assert waits.snapshot() == {}


def test_wait_then_release_in_order_writes_the_state_and_then_a_tombstone() -> None:
    waits = KeyWaits("state")
    written = waits.apply([WaitEvent(KEY, 10, 2, 99)])
    assert [decode_value(r.value) for r in written] == [{10: waits.snapshot()[KEY][0]}]
    released = waits.apply([WaitEvent(KEY, 10, None)])
    assert [r.value for r in released] == [None]
    assert waits.snapshot() == {}


def test_a_record_held_again_unchanged_writes_nothing() -> None:
    # Given offset 12 is held behind 10 (in lane 1)
    waits = KeyWaits("state")
    waits.apply([WaitEvent(KEY, 10, 1, 99), WaitEvent(KEY, 12, HELD)])
    # When the main lane reads it back and holds it again (10 is not done yet)
    written = waits.apply([WaitEvent(KEY, 12, HELD)])
    # Then the state is the same and no state record is written for it
    assert written == []
    assert [r.offset for r in waits.snapshot()[KEY]] == [10, 12]


def test_held_records_survive_a_restore_and_a_release_empties_the_key() -> None:
    waits = KeyWaits("state")
    written = waits.apply([WaitEvent(KEY, 10, 1, 99), WaitEvent(KEY, 12, HELD)])
    restored = KeyWaits("state")
    restored.restore((r.key or b"", r.value) for r in written)
    assert restored.snapshot() == waits.snapshot()
    assert {r.lane for r in restored.snapshot()[KEY]} == {1, HELD}
    tomb = restored.apply([WaitEvent(KEY, 10, None), WaitEvent(KEY, 12, None)])
    assert [r.value for r in tomb] == [None]
    assert restored.snapshot() == {}
