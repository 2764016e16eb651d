"""Draining versions (docs/versions.md#draining-a-version): the report from its two reads,
and which build a run needs. The same report on the embedded runtime, ``GET
/v1/versions``, the console's versions page and ``cairn versions``:
tests/embedded/test_versions.py."""

from __future__ import annotations

from cairn.engine.retiring import needs
from cairn.engine.versions import OnBuild, assemble
from cairn.model.builds import LiveBuild, Versioning
from cairn.store.versions import InFlight, Registered


def test_each_version_says_what_of_it_is_in_flight_and_the_newest_is_where_runs_start() -> None:
    registered = [
        Registered("book", 1, 10.0),
        Registered("book", 2, 20.0),
        Registered("ship", 1, 5.0),
    ]
    in_flight = [
        InFlight("default", "book", 1, "b1", runs=2, waiting=2, oldest_at=12.0),
        InFlight("default", "book", 1, None, runs=1, waiting=0, oldest_at=11.0),  # unrouted
        InFlight("acme", "audit", 4, None, runs=1, waiting=0, oldest_at=30.0),  # shared with us
    ]
    shown = {w.workflow: w for w in assemble("default", registered, in_flight)}
    assert set(shown) == {"book", "ship", "acme/audit"}
    old, new = shown["book"].versions
    assert (old.version, old.in_flight, old.waiting, old.oldest_at, old.newest) == (
        1,
        3,
        2,
        11.0,
        False,
    )
    assert not old.drained and new.drained and new.newest and shown["book"].in_flight == 3
    assert old.builds == (OnBuild("b1", 2, 2, 12.0),)
    (theirs,) = shown["acme/audit"].versions
    assert theirs.registered_at is None and not theirs.newest and theirs.in_flight == 1
    assert shown["ship"].versions[0].to_dict() == {
        "version": 1, "registered_at": 5.0, "newest": True, "in_flight": 0, "waiting": 0,
        "oldest_at": None, "drained": True, "builds": [], "patches": [],
    }  # fmt: skip


def test_a_build_is_needed_only_by_runs_that_no_other_live_build_may_run() -> None:
    key = "trip@1"
    v1 = LiveBuild("v1", frozenset({key}), first_at=1.0)
    v2 = LiveBuild("v2", frozenset({key}), frozenset({"v1"}), first_at=2.0)
    v3 = LiveBuild("v3", frozenset({"other@1"}), frozenset({"v1"}), first_at=3.0)
    assert needs(Versioning.PINNED, "v1", [v1, v2], key)  # pinned: its own build, always
    assert not needs(Versioning.AUTO_UPGRADE, "v1", [v1, v2], key)  # v2 takes it over
    assert needs(Versioning.AUTO_UPGRADE, "v1", [v1], key)  # nobody else may
    assert needs(Versioning.AUTO_UPGRADE, "v1", [v1, v3], key)  # v3 does not run trip@1
    assert not needs(Versioning.ANY, "v1", [v1], key)  # any worker of its queue
