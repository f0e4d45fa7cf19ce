"""The fence's pure lease decisions (siding.pipeline.executor.lease)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from siding.config import parse_config
from siding.config.sections import remote_checkpoint
from siding.errors import ConfigError
from siding.pipeline.executor.lease import (
    HOLDER_SHARE,
    Free,
    Held,
    Lease,
    decide,
    decode,
    encode,
    fold,
    fold_all,
    holder_until,
    newer,
    outwaited,
    won,
)

A, B = "a:1:x", "b:2:y"


def test_a_record_reads_back_as_written() -> None:
    lease = Lease(3, A, 4.0, released=True)
    key, value = encode(lease, 1_000)
    assert key == b"3"
    assert decode(value) == lease


@pytest.mark.parametrize("value", [None, b"", b"{", b'{"epoch": 0, "holder": "a"}', b"[]"])
def test_a_record_that_is_not_a_lease_is_ignored(value: bytes | None) -> None:
    assert decode(value) is None


def test_the_first_claim_of_an_epoch_wins_a_race() -> None:
    # Given A and B both saw epoch 1 expire and both claimed epoch 2, A first in the log
    old = Lease(1, "c", 4.0)
    current, changed = fold_all(old, [Lease(2, A, 4.0), Lease(2, B, 4.0), Lease(2, A, 4.0)])
    assert changed and current == Lease(2, A, 4.0)
    assert won(current, A, 2) and not won(current, B, 2)


def test_an_older_epoch_changes_nothing() -> None:
    # A renewal the old holder sent before it was frozen lands after the new claim
    assert fold(Lease(2, B, 4.0), Lease(1, A, 4.0)) is None


def test_nobody_ever_held_it() -> None:
    assert decide(None, 0.0, 0.0) == Free(1)


def test_a_released_lease_is_free_at_once() -> None:
    assert decide(Lease(5, A, 10.0, released=True), 100.0, 100.0) == Free(6)


def test_a_lease_is_held_until_its_length_passed_since_it_was_read() -> None:
    lease = Lease(5, A, 10.0)
    assert decide(lease, 100.0, 109.5) == Held(A, 5, 0.5)
    assert decide(lease, 100.0, 110.0) == Free(6)


@given(
    sent=st.floats(0, 1e6),
    delay=st.floats(0, 60),
    lease_s=st.floats(0.1, 600),
    later=st.floats(0, 1200),
)
def test_the_holder_gives_up_before_anyone_may_claim(
    sent: float, delay: float, lease_s: float, later: float
) -> None:
    # Given a renewal sent at ``sent`` and read by a standby ``delay`` later
    seen = sent + delay
    now = seen + later
    # When the standby may claim at ``now``, the holder's own clock has run out
    if isinstance(decide(Lease(1, A, lease_s), seen, now), Free):
        assert now > holder_until(sent, lease_s)
    assert holder_until(sent, lease_s) == pytest.approx(sent + lease_s * HOLDER_SHARE)


@given(st.lists(st.tuples(st.integers(1, 5), st.sampled_from([A, B])), max_size=20))
def test_the_lease_never_goes_back_to_an_older_epoch(claims: list[tuple[int, str]]) -> None:
    current: Lease | None = None
    for epoch, holder in claims:
        before = current
        current, _ = fold_all(current, [Lease(epoch, holder, 1.0)])
        if before is not None:
            assert current is not None and current.epoch >= before.epoch


def test_a_dead_holders_lease_found_after_a_slow_first_read_is_taken_not_refused() -> None:
    # Given a restart without --standby that began watching at 100, and whose first read of the
    # fence topic (a loaded machine: connecting, fetching) brought the SIGKILLed holder's last
    # renewal only at 103
    found = seen = 103.0
    lease = Lease(1, A, 10.0)
    # Then it keeps waiting past one lease from its own start (stop 34's CI: it gave up at 110
    # with "route ... is run by ...", where the lease ran out at 113)...
    for now in (110.0, 110.5, 112.9):
        assert isinstance(decide(lease, seen, now), Held)
        assert not outwaited(lease, found, seen)
    # ...and takes the route when the lease runs out
    assert decide(lease, seen, 113.0) == Free(2)


@given(found=st.floats(0, 1e6), share=st.floats(0, 0.999), lease_s=st.floats(0.1, 600))
def test_a_holder_that_renews_nothing_after_it_was_found_is_never_outwaited(
    found: float, share: float, lease_s: float
) -> None:
    # However late its last record was read (up to ``share`` of a lease after a first read at
    # ``found``), a dead holder whose renewals stopped makes nobody give up
    assert not outwaited(Lease(1, A, lease_s), found, found + share * lease_s)


def test_a_holder_still_renewing_one_lease_after_it_was_found_is_alive() -> None:
    lease = Lease(4, A, 10.0)
    assert not outwaited(lease, 100.0, 108.0)
    assert not outwaited(lease, 100.0, 110.0)
    assert outwaited(lease, 100.0, 110.5)
    # A released lease is free: nothing to give up on
    assert not outwaited(Lease(4, A, 10.0, released=True), 100.0, 120.0)
    assert not outwaited(None, 100.0, 120.0)


def test_workers_see_a_newer_epoch() -> None:
    assert newer(2, [Lease(1, A, 1.0), Lease(2, A, 1.0)]) is None
    assert newer(2, [Lease(3, B, 1.0), Lease(2, A, 1.0)]) == 3


def test_renew_must_fit_the_lease_several_times() -> None:
    text = '[kafka]\nbootstrap = "k:9092"\n[fence]\nenabled = true\nlease = "3s"\nrenew = "2s"\n'
    text += '[[route]]\ntopic = "t"\ngroup = "g"\nendpoint = "grpc://c:1"\n'
    with pytest.raises(ConfigError, match=r"fence\.renew"):
        parse_config(text)
    config = parse_config(text.replace('renew = "2s"', 'renew = "1s"'))
    assert config.fence.enabled and config.fence.lease == 3.0


@pytest.mark.parametrize(
    ("checkpoint_dir", "remote"),
    [
        ("s3a://bucket/siding", True),
        ("hdfs://nn:8020/siding", True),
        ("gs://bucket/x", True),
        ("file:///var/lib/siding", False),
        ("/var/lib/siding", False),
        ("relative/ckpt", False),
        ("C:\\siding", False),
    ],
)
def test_only_a_checkpoint_other_machines_reach_is_remote(
    checkpoint_dir: str, remote: bool
) -> None:
    assert remote_checkpoint(checkpoint_dir) is remote


@pytest.mark.parametrize(
    ("fence", "checkpoint_dir", "fenced"),
    [
        ("", "s3a://bucket/siding", True),  # a remote checkpoint: the flock cannot guard it
        ("", "/tmp/ckpt", False),  # a local folder: the flock does
        ("[fence]\nenabled = false\n", "s3a://bucket/siding", False),
        ("[fence]\nenabled = true\n", "/tmp/ckpt", True),
    ],
)
def test_the_fence_is_on_by_default_exactly_for_a_remote_checkpoint(
    fence: str, checkpoint_dir: str, fenced: bool
) -> None:
    text = f'[kafka]\nbootstrap = "k:9092"\n[spark]\ncheckpoint_dir = "{checkpoint_dir}"\n{fence}'
    text += '[[route]]\ntopic = "t"\ngroup = "g"\nendpoint = "grpc://c:1"\n'
    assert parse_config(text).fenced is fenced
