"""The contract a :class:`~cairn.lease.slots.Slots` backend keeps: subclass
:class:`SlotsContract` as ``Test...`` beside a ``pair`` fixture yielding ``(leases,
slots)`` over the same backend (``tests/contract/test_slots.py`` runs it on memory and
Redis)."""

from __future__ import annotations

import time

from cairn.lease.port import Lease, Leases
from cairn.limits.concurrency import Slots, holder_of
from cairn.model.keys import lease_key

TTL = 0.4


def _lease(leases: Leases, n: int) -> str:
    """A new lease's slot holder."""
    held = leases.acquire(lease_key(f"run-{n}", "call", 1, "run"), TTL)
    assert held is not None
    return holder_of(held.key, held.token)


class SlotsContract:
    def test_a_pool_gives_at_most_its_limit_of_slots(self, pair: tuple[Leases, Slots]) -> None:
        leases, slots = pair
        held = [_lease(leases, n) for n in range(4)]
        taken = [slots.take([("ns/openai", 3)], lease) for lease in held]
        assert taken == [None, None, None, "ns/openai"]
        assert slots.holders(["ns/openai"]) == {"ns/openai": 3}
        assert slots.pools() == ["ns/openai"]
        assert slots.take([("ns/openai", 3)], held[0]) is None  # held already: still one
        slots.give_back(["ns/openai"], held[1])
        assert slots.take([("ns/openai", 3)], held[3]) is None
        assert slots.holders(["ns/openai"]) == {"ns/openai": 3}

    def test_several_pools_are_taken_all_or_nothing(self, pair: tuple[Leases, Slots]) -> None:
        leases, slots = pair
        first, second = _lease(leases, 1), _lease(leases, 2)
        pools = [("ns/tenant=a", 5), ("ns/openai", 1)]
        assert slots.take(pools, first) is None
        assert slots.take(pools, second) == "ns/openai"
        assert slots.holders(["ns/tenant=a", "ns/openai"]) == {"ns/tenant=a": 1, "ns/openai": 1}

    def test_a_slot_lives_and_dies_with_its_lease(self, pair: tuple[Leases, Slots]) -> None:
        """A dead holder's slot (its lease ran out, unreleased) is free once the lease
        has expired; a released lease frees its slot at once; a lease taken over holds
        none of the old holder's."""
        leases, slots = pair
        dead, live = _lease(leases, 1), _lease(leases, 2)
        assert slots.take([("ns/k", 2)], dead) is None
        assert slots.take([("ns/k", 2)], live) is None
        key, _, token = live.partition("|")
        assert leases.acquire(key, TTL) is None  # still live: held
        leases.release(Lease(key, token, TTL))
        assert slots.holders(["ns/k"]) == {"ns/k": 1}
        time.sleep(TTL + 0.15)
        assert slots.holders(["ns/k"]) == {"ns/k": 0}
        assert slots.take([("ns/k", 1)], dead) == "ns/k"
        fresh = _lease(leases, 1)
        assert slots.take([("ns/k", 1)], fresh) is None

    def test_a_pool_found_full_is_contended_until_settled(self, pair: tuple[Leases, Slots]) -> None:
        """Giving a slot back tells whether a taker found the pool full since it was last
        settled (only then may anyone wait); settling with a counter read before a later
        taker found it full changes nothing — that taker may be parking."""
        leases, slots = pair
        first, second, third = _lease(leases, 1), _lease(leases, 2), _lease(leases, 3)
        assert slots.take([("ns/quiet", 1)], first) is None
        assert slots.give_back(["ns/quiet"], first) == {}
        assert slots.take([("ns/busy", 1)], first) is None
        assert slots.take([("ns/busy", 1)], second) == "ns/busy"
        contended = slots.give_back(["ns/busy", "ns/quiet"], first)
        assert list(contended) == ["ns/busy"]
        assert slots.take([("ns/busy", 1)], third) is None
        assert slots.take([("ns/busy", 1)], second) == "ns/busy"  # found full again
        slots.settle("ns/busy", contended["ns/busy"])  # stale: it stays contended
        again = slots.give_back(["ns/busy"], third)
        assert list(again) == ["ns/busy"] and again["ns/busy"] > contended["ns/busy"]
        slots.settle("ns/busy", again["ns/busy"])
        assert slots.take([("ns/busy", 1)], second) is None
        assert slots.give_back(["ns/busy"], second) == {}
