"""The contracts a backend of each port must keep, written once and run against every
backend (``tests/contract/`` runs them on memory and Redis leases, filesystem, memory and
S3 object stores; run them on yours). Each is a mixin: subclass it as ``Test...`` beside a
fixture that yields a fresh backend. The store's and the broker's contracts are modules of
their own (:mod:`cairn.testing.store_contract`, :mod:`cairn.testing.publisher_contract`).

Absent services are skipped on a laptop and fail in CI (``CAIRN_TEST_REQUIRE_SERVICES``):
a contract that silently stopped running would prove nothing.
"""

from __future__ import annotations

import threading
import time

import pytest

from cairn.artifacts.stores import ObjectStore, blob_key, digest
from cairn.errors import ArtifactNotFound
from cairn.lease import port as lease_port
from cairn.lease.heartbeat import Heartbeats
from cairn.lease.port import Leases
from cairn.model.keys import lease_key

KEY = lease_key("run-1", "fetch.page", 2, "run")
TTL = 0.4


class LeasesContract:
    """What a worker and the scheduler rely on from a :class:`~cairn.lease.port.Leases`
    backend. Subclass it as ``Test...`` beside a ``leases`` fixture that yields a fresh
    backend; expiry is waited for for real (a lease's TTL here is a fraction of a
    second), because only a real clock proves the backend's."""

    @staticmethod
    def past_ttl() -> None:
        time.sleep(TTL + 0.15)

    def test_a_held_lease_is_refused_to_the_same_and_older_attempts(self, leases: Leases) -> None:
        held = leases.acquire(KEY, 30, {"worker": "a"}, attempt=2)
        assert held is not None and held.attempt == 2 and not held.superseded
        assert leases.acquire(KEY, 30, {"worker": "b"}, attempt=2) is None
        assert leases.acquire(KEY, 30, {"worker": "b"}, attempt=1) is None
        assert leases.stats()["contended"] == 2
        assert leases.renew(held)

    def test_a_newer_attempt_supersedes_an_older_ones_lease(self, leases: Leases) -> None:
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

    def test_a_lapsed_claim_is_taken_once_with_its_record(self, leases: Leases) -> None:
        lease = leases.acquire(KEY, TTL, {"worker": "doomed", "attempt": 1})
        assert lease is not None
        assert KEY in leases.claims()
        assert leases.lapsed(10) == []  # still held
        self.past_ttl()
        (lapsed,) = leases.lapsed(10)
        assert lapsed.key == KEY and lapsed.record is not None
        assert lapsed.record["worker"] == "doomed" and str(lapsed.record["attempt"]) == "1"
        assert leases.lapsed(10) == []  # taken: a second sweep does not see it
        leases.settle_lapsed(KEY)  # dealt with
        assert KEY not in leases.claims()
        # The record went with it: a later claim is not a takeover (the death is counted once).
        again = leases.acquire(KEY, 30, {"worker": "next"})
        assert again is not None and not again.took_over and not again.lapsed

    def test_a_lapsed_claim_not_settled_comes_back(
        self, leases: Leases, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The scheduler that took it died before dealing with it: another takes it later."""
        monkeypatch.setattr(lease_port, "LAPSED_HOLD_S", 0.3)
        assert leases.acquire(KEY, TTL, {"worker": "doomed"}) is not None
        self.past_ttl()
        assert [lapsed.key for lapsed in leases.lapsed(10)] == [KEY]
        assert leases.lapsed(10) == []
        time.sleep(0.45)
        (again,) = leases.lapsed(10)
        assert again.key == KEY and again.record is None  # the record went with the first take

    def test_settling_leaves_a_new_holders_claim_alone(self, leases: Leases) -> None:
        assert leases.acquire(KEY, TTL, {"worker": "doomed"}) is not None
        self.past_ttl()
        assert len(leases.lapsed(10)) == 1
        assert leases.acquire(KEY, 30, {"worker": "new"}) is not None  # a redelivered message
        leases.settle_lapsed(KEY)
        assert KEY in leases.claims()

    def test_a_claim_taken_over_before_the_sweep_is_not_lapsed(self, leases: Leases) -> None:
        dead = leases.acquire(KEY, TTL, {"worker": "doomed"})
        assert dead is not None
        self.past_ttl()
        taker = leases.acquire(KEY, 30, {"worker": "taker"})
        assert taker is not None and taker.took_over  # it found the dead holder's record
        assert taker.lapsed
        assert leases.lapsed(10) == []  # so the sweep counts nothing

    def test_a_claim_after_the_sweep_took_a_lapsed_one_is_lapsed_not_a_takeover(
        self, leases: Leases
    ) -> None:
        """The sweep has taken the dead holder's record, and not yet dealt with the claim
        (counted the recovery), when a redelivered message claims the lease: the claim
        knows it resumes interrupted work, and leaves the count to the sweep."""
        assert leases.acquire(KEY, TTL, {"worker": "doomed"}) is not None
        self.past_ttl()
        (_taken,) = leases.lapsed(10)
        taker = leases.acquire(KEY, 30, {"worker": "taker"})
        assert taker is not None and taker.lapsed and not taker.took_over

    def test_only_a_claim_after_a_lapsed_one_is_lapsed(self, leases: Leases) -> None:
        first = leases.acquire(KEY, 30, {"worker": "a", "attempt": 1}, attempt=1)
        assert first is not None and not first.lapsed
        newer = leases.acquire(KEY, 30, {"worker": "b", "attempt": 2}, attempt=2)
        assert newer is not None and newer.superseded and not newer.lapsed  # it was held
        assert leases.release(newer)
        after_release = leases.acquire(KEY, TTL, {"worker": "c"}, attempt=2)
        assert after_release is not None and not after_release.lapsed
        self.past_ttl()
        assert len(leases.lapsed(10)) == 1
        leases.settle_lapsed(KEY)  # the sweep dealt with it: counted, sent again
        after_settled = leases.acquire(KEY, 30, {"worker": "d"}, attempt=2)
        assert after_settled is not None and not after_settled.lapsed

    def test_forgetting_a_dead_holders_record_holds_its_claim_back_until_settled(
        self, leases: Leases
    ) -> None:
        """The older sweep found a dead holder's record (not its lapsed claim): the record
        goes, the claim stays held back — a claim meanwhile is lapsed, not a takeover —
        until the sweep settles it."""
        live = leases.acquire(KEY, 30, {"worker": "alive"})
        assert live is not None
        assert not leases.forget(KEY)  # held: nothing to recover, nothing changed
        assert leases.beats([KEY])[0] is not None and KEY in leases.claims()
        assert leases.release(live)
        assert leases.acquire(KEY, TTL, {"worker": "doomed"}) is not None
        self.past_ttl()
        assert leases.forget(KEY)
        assert leases.beats([KEY]) == [None]
        assert KEY in leases.claims() and leases.lapsed(10) == []  # held back, not retaken
        taker = leases.acquire(KEY, 30, {"worker": "taker"})
        assert taker is not None and taker.lapsed and not taker.took_over
        leases.settle_lapsed(KEY)
        assert KEY in leases.claims()  # the taker's claim now
        assert leases.release(taker)
        assert leases.acquire(KEY, TTL, {"worker": "again"}) is not None
        self.past_ttl()
        assert leases.forget(KEY)
        leases.settle_lapsed(KEY)
        assert KEY not in leases.claims()
        clean = leases.acquire(KEY, 30, {"worker": "next"})
        assert clean is not None and not clean.lapsed

    def test_renewals_keep_a_claim_off_the_lapsed_list_and_release_ends_it(
        self, leases: Leases
    ) -> None:
        lease = leases.acquire(KEY, TTL, {"worker": "alive"})
        assert lease is not None
        for _ in range(3):
            time.sleep(TTL / 2)
            assert leases.renew(lease)
            assert leases.lapsed(10) == []
        assert leases.release(lease, finished=True)
        assert KEY not in leases.claims()
        self.past_ttl()
        assert leases.lapsed(10) == []

    def test_handing_on_releases_as_finished_and_claims_the_next_in_one_call(
        self, leases: Leases
    ) -> None:
        following = lease_key("run-1", "store.page", 1, "run")
        lease = leases.acquire(KEY, 30, {"worker": "w", "attempt": 1})
        assert lease is not None
        nxt = leases.hand_on(
            lease, following, 30, timings={"commit": 0.002}, record={"worker": "w"}, attempt=1
        ).taken()
        assert nxt is not None and nxt.key == following and nxt.attempt == 1
        assert nxt.fence == 1 and not (nxt.took_over or nxt.lapsed or nxt.superseded)
        assert not leases.held(KEY) and leases.held(following)
        assert leases.claims() == [following]
        assert leases.step_times()["commit"].counts[1] == 1  # the release's timings
        assert not leases.renew(lease)  # the first is let go ...
        assert leases.renew(nxt)  # ... the next held, with its heartbeat record
        (record,) = leases.beats([following])
        assert record is not None and record["worker"] == "w"
        assert leases.stats()["acquired"] == 2
        # Held by another already: released all the same, and not claimed.
        other = leases.acquire(KEY, 30, {"worker": "other"})
        assert other is not None
        assert leases.hand_on(nxt, KEY, 30, record={"worker": "w"}).taken() is None
        assert not leases.held(following) and leases.renew(other)

    def test_a_hand_on_is_answered_when_asked_and_other_calls_go_on_meanwhile(
        self, leases: Leases
    ) -> None:
        following = lease_key("run-1", "store.page", 1, "run")
        lease = leases.acquire(KEY, 30, {"worker": "w"})
        assert lease is not None
        handing = leases.hand_on(lease, following, 30, record={"worker": "w"})
        # Calls made before its answer is read are answered as ever.
        other = leases.acquire("cairn:lease:other", 30, {"worker": "w"})
        assert other is not None and leases.release(other, finished=True)
        nxt = handing.taken()
        assert nxt is not None and nxt.key == following
        assert handing.taken() == nxt  # read once, the same after
        assert not leases.held(KEY) and leases.renew(nxt)

    def test_counters_are_added_to_together(self, leases: Leases) -> None:
        leases.add({"branches_carried": 3, "branches_spilled": 0})
        leases.add({"branches_carried": 1, "branches_spilled": 2})
        leases.count("branches_spilled")
        stats = leases.stats()
        assert (stats["branches_carried"], stats["branches_spilled"]) == (4, 3)

    def test_progress_is_timed_apart_from_beats(self, leases: Leases) -> None:
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

    def test_a_paused_holder_trusts_nothing_until_it_has_renewed(self, leases: Leases) -> None:
        """Past its own monotonic deadline a holder asks before it acts: once someone else
        has the lease, the answer is no and stays no."""
        heartbeats = Heartbeats(leases)
        lease = leases.acquire(KEY, TTL, {"worker": "paused"})
        assert lease is not None
        beat = heartbeats.hold(lease, interval_s=60)  # no renewal comes: as if SIGSTOPped
        assert heartbeats.confirm(beat)
        self.past_ttl()
        assert not beat.valid
        taker = leases.acquire(KEY, 30, {"worker": "taker"})
        assert taker is not None
        assert not heartbeats.confirm(beat)
        assert beat.lost.is_set() and not heartbeats.confirm(beat)

    def test_a_holder_past_its_deadline_whose_lease_survived_is_trusted_again(
        self,
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

    def test_an_announced_stop_reaches_its_holder_at_once(self, leases: Leases) -> None:
        """A stop announced for a held lease makes its holder ask whether it must stop
        now, not at its next beat (an hour away here); other keys are not its concern."""
        asked = threading.Event()

        def cancel_requested() -> bool:  # what PostgreSQL would say: the run is cancelling
            asked.set()
            return True

        heartbeats = Heartbeats(leases)
        lease = leases.acquire(KEY, TTL, {"worker": "w"})
        assert lease is not None
        beat = heartbeats.hold(lease, interval_s=3600, cancel_requested=cancel_requested)
        stopped = threading.Event()
        beat.on_cancel = stopped.set
        leases.announce_stops(["lease:someone-else"])
        deadline = time.monotonic() + 10
        while not stopped.is_set() and time.monotonic() < deadline:
            leases.announce_stops([KEY])  # a subscriber may still be connecting: repeat
            stopped.wait(0.1)
        assert asked.is_set() and stopped.is_set() and beat.cancelled.is_set()
        heartbeats.drop(beat)

    def test_a_runs_chunk_log_is_read_in_order_after_an_id_and_waited_on(
        self, leases: Leases
    ) -> None:
        run = f"run-{time.monotonic_ns()}"
        leases.append_chunks(run, [{"text": "a"}, {"text": "b"}])
        leases.append_chunks(run, [{"text": "c"}])
        read = leases.read_chunks(run, "0")
        assert [chunk["text"] for _id, chunk in read] == ["a", "b", "c"]
        assert [chunk["text"] for _id, chunk in leases.read_chunks(run, read[1][0])] == ["c"]
        assert leases.read_chunks(run, read[2][0]) == []
        later = threading.Timer(0.2, leases.append_chunks, args=(run, [{"text": "d"}]))
        later.start()
        started = time.monotonic()
        waited = leases.read_chunks(run, read[2][0], block_s=5.0)
        assert [chunk["text"] for _id, chunk in waited] == ["d"]
        assert time.monotonic() - started < 4.0  # woken by the chunk, not the timeout
        later.join()
        assert leases.read_chunks(f"{run}-other", "0", block_s=0.1) == []

    def test_a_chunk_read_returns_at_most_chunks_per_read(self, leases: Leases) -> None:
        """A reader that gets a full read knows more waits (``cairn watch`` catching up)."""
        run = f"run-{time.monotonic_ns()}"
        many = lease_port.CHUNKS_PER_READ + 5
        leases.append_chunks(run, [{"text": str(n)} for n in range(many)])
        first = leases.read_chunks(run, "0")
        assert len(first) == lease_port.CHUNKS_PER_READ
        rest = leases.read_chunks(run, first[-1][0])
        assert [c["text"] for _id, c in first + rest] == [str(n) for n in range(many)]


class ObjectStoreContract:
    """What the artifacts rely on from an :class:`~cairn.artifacts.stores.ObjectStore`:
    content addressed by its sha256, written once, read back or not found. Subclass it
    beside an ``objects`` fixture yielding an empty store."""

    def test_a_blob_is_stored_under_its_sha256_once(self, objects: ObjectStore) -> None:
        data = b"the same bytes"
        sha = objects.put(data)
        assert sha == digest(data)
        assert objects.exists(sha) and objects.read(sha) == data
        assert objects.ensure(sha, data) is False  # already there: not written again
        assert objects.put(data) == sha
        assert [(b.sha256, b.size) for b in objects.blobs()] == [(sha, len(data))]
        assert objects.uri(sha).endswith(blob_key(sha))

    def test_reading_a_missing_blob_is_not_found_and_deleting_twice_is_fine(
        self, objects: ObjectStore
    ) -> None:
        sha = objects.put(b"short-lived")
        objects.delete(sha)
        objects.delete(sha)
        assert not objects.exists(sha)
        with pytest.raises(ArtifactNotFound):
            objects.read(sha)
        assert list(objects.blobs()) == []
