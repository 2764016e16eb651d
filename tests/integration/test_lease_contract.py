"""One contract, two lease implementations: what a worker and the scheduler may rely on,
checked against Redis (the fleet's) and the in-memory twin (the embedded default's) alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from cairn.lease import leases as lease_module
from cairn.lease.heartbeat import Heartbeats
from cairn.lease.leases import Leases, MemoryLeases, RedisLeases
from cairn.model.keys import lease_key, parse_lease_key

KEY = lease_key("run-1", "fetch.page", 2, "run")
TTL = 0.4


@pytest.fixture(params=["redis", "memory"])
def leases(request: pytest.FixtureRequest, redis_urls: tuple[str, str]) -> Iterator[Leases]:
    if request.param == "memory":
        yield MemoryLeases()
        return
    client = redis.Redis.from_url(redis_urls[1])
    yield RedisLeases(client)
    client.close()


def _past_ttl() -> None:
    time.sleep(TTL + 0.15)


def test_a_lease_key_names_its_execution() -> None:
    assert parse_lease_key(KEY) == ("run-1", "fetch.page", 2, "run")


def test_a_held_lease_is_refused_to_the_same_and_older_attempts(leases: Leases) -> None:
    held = leases.acquire(KEY, 30, {"worker": "a"}, attempt=2)
    assert held is not None and held.attempt == 2 and not held.superseded
    assert leases.acquire(KEY, 30, {"worker": "b"}, attempt=2) is None
    assert leases.acquire(KEY, 30, {"worker": "b"}, attempt=1) is None
    assert leases.stats()["contended"] == 2
    assert leases.renew(held)


def test_a_newer_attempt_supersedes_an_older_ones_lease(leases: Leases) -> None:
    stuck = leases.acquire(KEY, 30, {"worker": "stuck", "attempt": 1}, attempt=1)
    assert stuck is not None
    retry = leases.acquire(KEY, 30, {"worker": "fresh", "attempt": 2}, attempt=2)
    assert retry is not None and retry.superseded and not retry.took_over
    assert retry.fence > stuck.fence
    assert not leases.renew(stuck)  # the stuck attempt can neither renew ...
    assert not leases.release(stuck)  # ... nor release the newer one's lease
    assert leases.renew(retry)
    (record,) = leases.beats([KEY])
    assert record is not None and record["worker"] == "fresh"
    assert leases.stats()["superseded"] == 1


def test_a_lapsed_claim_is_taken_once_with_its_record(leases: Leases) -> None:
    lease = leases.acquire(KEY, TTL, {"worker": "doomed", "attempt": 1})
    assert lease is not None
    assert KEY in leases.claims()
    assert leases.lapsed(10) == []  # still held
    _past_ttl()
    (lapsed,) = leases.lapsed(10)
    assert lapsed.key == KEY and lapsed.record is not None
    assert lapsed.record["worker"] == "doomed" and str(lapsed.record["attempt"]) == "1"
    assert leases.lapsed(10) == []  # taken: a second sweep does not see it
    leases.settle_lapsed(KEY)  # dealt with
    assert KEY not in leases.claims()
    # The record went with it: a later claim is not a takeover (the death is counted once).
    again = leases.acquire(KEY, 30, {"worker": "next"})
    assert again is not None and not again.took_over


def test_a_lapsed_claim_not_settled_comes_back(
    leases: Leases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler that took it died before dealing with it: another takes it later."""
    monkeypatch.setattr(lease_module, "LAPSED_HOLD_S", 0.3)
    assert leases.acquire(KEY, TTL, {"worker": "doomed"}) is not None
    _past_ttl()
    assert [lapsed.key for lapsed in leases.lapsed(10)] == [KEY]
    assert leases.lapsed(10) == []
    time.sleep(0.45)
    (again,) = leases.lapsed(10)
    assert again.key == KEY and again.record is None  # the record went with the first take


def test_settling_leaves_a_new_holders_claim_alone(leases: Leases) -> None:
    assert leases.acquire(KEY, TTL, {"worker": "doomed"}) is not None
    _past_ttl()
    assert len(leases.lapsed(10)) == 1
    assert leases.acquire(KEY, 30, {"worker": "new"}) is not None  # a redelivered message
    leases.settle_lapsed(KEY)
    assert KEY in leases.claims()


def test_a_claim_taken_over_before_the_sweep_is_not_lapsed(leases: Leases) -> None:
    dead = leases.acquire(KEY, TTL, {"worker": "doomed"})
    assert dead is not None
    _past_ttl()
    taker = leases.acquire(KEY, 30, {"worker": "taker"})
    assert taker is not None and taker.took_over  # it found the dead holder's record
    assert leases.lapsed(10) == []  # so the sweep counts nothing


def test_renewals_keep_a_claim_off_the_lapsed_list_and_release_ends_it(leases: Leases) -> None:
    lease = leases.acquire(KEY, TTL, {"worker": "alive"})
    assert lease is not None
    for _ in range(3):
        time.sleep(TTL / 2)
        assert leases.renew(lease)
        assert leases.lapsed(10) == []
    assert leases.release(lease, finished=True)
    assert KEY not in leases.claims()
    _past_ttl()
    assert leases.lapsed(10) == []


def test_progress_is_timed_apart_from_beats(leases: Leases) -> None:
    lease = leases.acquire(KEY, 30, {"worker": "w"})
    assert lease is not None
    time.sleep(0.2)
    assert leases.renew(lease)
    (record,) = leases.beats([KEY])
    assert record is not None
    assert record["age_s"] < 0.1 and record["progress_age_s"] >= 0.2
    assert record["running_s"] >= 0.2
    assert leases.beat(lease, {"done": 1}, progressed=True)
    (record,) = leases.beats([KEY])
    assert record is not None and record["progress_age_s"] < 0.1


def test_a_paused_holder_trusts_nothing_until_it_has_renewed(leases: Leases) -> None:
    """Past its own monotonic deadline a holder asks before it acts: once someone else
    has the lease, the answer is no and stays no."""
    heartbeats = Heartbeats(leases)
    lease = leases.acquire(KEY, TTL, {"worker": "paused"})
    assert lease is not None
    beat = heartbeats.hold(lease, interval_s=60)  # no renewal comes: as if SIGSTOPped
    assert heartbeats.confirm(beat)
    _past_ttl()
    assert not beat.valid
    taker = leases.acquire(KEY, 30, {"worker": "taker"})
    assert taker is not None
    assert not heartbeats.confirm(beat)
    assert beat.lost.is_set() and not heartbeats.confirm(beat)


def test_a_holder_past_its_deadline_whose_lease_survived_is_trusted_again(
    leases: Leases,
) -> None:
    """The deadline passed without a renewal (Redis was slow to answer), but nobody took
    the lease: re-confirming renews it, and the holder goes on."""
    heartbeats = Heartbeats(leases)
    lease = leases.acquire(KEY, 30, {"worker": "slow"})
    assert lease is not None
    beat = heartbeats.hold(lease, interval_s=60)
    beat.deadline = time.monotonic() - 1  # its own clock says: no longer sure
    assert not beat.valid
    assert heartbeats.confirm(beat) and beat.valid
