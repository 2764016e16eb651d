"""Builds (docs/versions.md): a workflow's ``versioning`` in its three forms and its
fault, the routing of a node to a build (pure), the build id a process derives from its
handlers' source, node messages and events carrying a build, and the builds table
through the store: announced, live, a run's build recorded once."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

import cairn
from cairn.config import Settings
from cairn.definitions.builder import Workflow
from cairn.definitions.loader import load_definition
from cairn.definitions.text import parse_text
from cairn.engine.builds import (
    BuildBook,
    build_of,
    handler_modules,
    package_version,
    source_digest,
)
from cairn.engine.orchestrator import Orchestrator
from cairn.engine.outbox import RelayOnly
from cairn.errors import WorkflowDefinitionError
from cairn.model.builds import (
    LiveBuild,
    Versioning,
    build_queue,
    route,
    starting_build,
    waiting_for,
)
from cairn.model.events import NodeFailed, NodeSucceeded, event_from_dict, event_to_dict
from cairn.model.messages import InvalidMessage, NodeMessage
from cairn.runtime import Runtime
from cairn.store.backends import store_for
from cairn.store.database import make_engine, upgrade
from cairn.store.schema import executions
from cairn.store.schema_fleet import builds
from cairn.testing.clock import FakeClock
from tests.unit.test_queues import Captured

STEP = "tests.unit.handlers:noop"

PINNED_YAML = f"""
name: booking
version: 1
versioning: pinned
start: quote
nodes:
  quote: {{handler: "{STEP}", next: done}}
  done:  {{end: succeeded}}
"""

decorated = cairn.workflow("booking", version=1, versioning="pinned")


@decorated.task(next="done")
def quote(ctx: cairn.StepContext, state: cairn.State) -> cairn.State:
    return {}


decorated.end("done")


# -- versioning: three forms, one fault ------------------------------------------------


def test_versioning_reads_the_same_in_yaml_the_builder_and_the_decorators() -> None:
    from_yaml = load_definition(parse_text(PINNED_YAML), resolve=False)
    built = (
        Workflow("booking", 1, versioning="pinned")
        .task("quote", STEP, next="done")
        .end("done")
        .build(resolve=False)
    )
    assert from_yaml.versioning is Versioning.PINNED
    assert built.versioning is Versioning.PINNED
    assert decorated.build(resolve=False).versioning is Versioning.PINNED
    assert from_yaml.nodes.keys() == built.nodes.keys()


def test_versioning_defaults_to_any() -> None:
    definition = Workflow("w", 1).task("a", STEP, next="e").end("e").build(resolve=False)
    assert definition.versioning is Versioning.ANY


@pytest.mark.parametrize("value", ["sometimes", "PINNED", 1, None])
def test_a_bad_versioning_is_the_fault_bad_versioning(value: object) -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        Workflow("w", 1, versioning=value).task("a", STEP, next="e").end("e").build(resolve=False)
    assert [fault.code for fault in caught.value.faults] == ["bad_versioning"]


def test_versioning_is_a_format_2_key() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_definition(parse_text("format: 1\n" + PINNED_YAML), resolve=False)
    assert "newer_key" in [fault.code for fault in caught.value.faults]


# -- routing, pure ---------------------------------------------------------------------

WF = "booking@1"
V1 = LiveBuild("v1", frozenset({WF}), frozenset(), first_at=100.0)
V2 = LiveBuild("v2", frozenset({WF}), frozenset({"v1"}), first_at=200.0)
V3_OTHER = LiveBuild("v3", frozenset({"other@1"}), frozenset({"v1"}), first_at=300.0)
V4_INCOMPATIBLE = LiveBuild("v4", frozenset({WF}), frozenset(), first_at=400.0)


def test_any_routes_nowhere_in_particular() -> None:
    assert route(Versioning.ANY, "v1", [V1, V2], WF) is None


def test_a_run_with_no_build_yet_is_not_routed() -> None:
    assert route(Versioning.PINNED, None, [V1], WF) is None
    assert route(Versioning.AUTO_UPGRADE, None, [V1], WF) is None


def test_pinned_goes_to_the_runs_build_live_or_not() -> None:
    assert route(Versioning.PINNED, "v1", [V1, V2], WF) == "v1"
    assert route(Versioning.PINNED, "v1", [V2], WF) == "v1"


def test_auto_upgrade_goes_to_the_newest_compatible_build_that_runs_the_version() -> None:
    live = [V1, V2, V3_OTHER, V4_INCOMPATIBLE]
    # v4 is newer but does not declare v1; v3 declares it but does not run booking@1.
    assert route(Versioning.AUTO_UPGRADE, "v1", live, WF) == "v2"
    assert route(Versioning.AUTO_UPGRADE, "v2", live, WF) == "v2"
    assert route(Versioning.AUTO_UPGRADE, "v1", [V1], WF) == "v1"
    # Nothing compatible is live: it stays on its own build, and waits for it.
    assert route(Versioning.AUTO_UPGRADE, "v1", [V4_INCOMPATIBLE], WF) == "v1"


def test_a_run_starts_on_the_newest_live_build_that_runs_its_workflow() -> None:
    assert starting_build([V1, V2, V3_OTHER], WF) == "v2"
    assert starting_build([V3_OTHER], WF) is None


def test_waiting_for_names_the_build_only_when_none_of_its_workers_is_live() -> None:
    assert waiting_for(Versioning.PINNED, "v1", [V2], WF) == "v1"
    assert waiting_for(Versioning.PINNED, "v1", [V1, V2], WF) is None
    assert waiting_for(Versioning.AUTO_UPGRADE, "v1", [V2], WF) is None
    assert waiting_for(Versioning.AUTO_UPGRADE, "v1", [V4_INCOMPATIBLE], WF) == "v1"
    assert waiting_for(Versioning.ANY, "v1", [], WF) is None


def test_a_routed_message_goes_to_its_builds_queue() -> None:
    assert build_queue("cairn", None) == "cairn"
    assert build_queue("gpu", "1.2.0-abc") == "gpu@1.2.0-abc"


# -- messages and events ---------------------------------------------------------------


def test_a_message_carries_its_build_and_leaves_it_out_when_unset() -> None:
    routed = NodeMessage("r", "booking", 1, "quote", 1, 1, build="v1")
    assert routed.to_dict()["build"] == "v1"
    assert NodeMessage.from_dict(routed.to_dict()) == routed
    assert "build" not in NodeMessage("r", "booking", 1, "quote", 1, 1).to_dict()
    with pytest.raises(InvalidMessage, match="build"):
        NodeMessage.from_dict({**routed.to_dict(), "build": "no spaces"})


def test_events_record_the_build_that_ran_them_and_omit_it_when_unset() -> None:
    succeeded = NodeSucceeded(at=1.0, node="quote", output={}, build="v1")
    failed = NodeFailed(at=1.0, node="quote", build="v2")
    for event in (succeeded, failed):
        assert event_from_dict(event_to_dict(event)) == event
    assert event_to_dict(succeeded)["build"] == "v1"
    assert "build" not in event_to_dict(NodeSucceeded(at=1.0, node="quote", output={}))
    assert "build" not in event_to_dict(NodeFailed(at=1.0, node="quote"))


# -- the build id ----------------------------------------------------------------------


def test_the_build_id_is_the_setting_when_set() -> None:
    assert build_of(Settings(build="release-7"), []) == "release-7"


def test_the_derived_build_is_the_version_and_a_digest_of_the_handlers_modules() -> None:
    definition = load_definition(parse_text(PINNED_YAML), resolve=False)
    assert handler_modules([definition]) == ["tests.unit.handlers"]
    source = Path(__file__).with_name("handlers.py").read_bytes()
    expected = hashlib.sha256(b"tests.unit.handlers\n" + source + b"\n").hexdigest()
    assert source_digest(["tests.unit.handlers"]) == expected
    assert build_of(Settings(), [definition]) == f"{package_version()}-{expected[:12]}"


def test_the_digest_changes_with_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "build_probe_handlers.py"
    module.write_text("def step(ctx, state):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = source_digest(["build_probe_handlers"])
    module.write_text("def step(ctx, state):\n    return {'changed': True}\n")
    assert source_digest(["build_probe_handlers"]) != before
    # A module with no source file still counts by its name.
    assert source_digest(["no_such_module_anywhere"]) != source_digest([])


# -- the builds table, through the store (SQLite) --------------------------------------


@pytest.fixture
def orchestrator(tmp_path: Path) -> Orchestrator:
    engine = make_engine(f"sqlite:///{tmp_path / 'builds.db'}")
    upgrade(engine)
    store = store_for(engine)
    settings = Settings(build_announce_s=1.0, home=tmp_path)
    orchestrator = Orchestrator(store, RelayOnly(), settings)
    orchestrator.registry.register(load_definition(parse_text(PINNED_YAML), resolve=False))
    return orchestrator


def test_announced_builds_are_live_and_a_run_starts_on_the_newest(
    orchestrator: Orchestrator, wall_clock: FakeClock
) -> None:
    book, store = orchestrator.builds, orchestrator.store
    with store.transaction() as tx:
        tx.announce_build("v1", ["booking@1"], [])
    wall_clock.advance(0.01)  # the database's clock (SQLite: this process's)
    with store.transaction() as tx:
        tx.announce_build("v2", ["booking@1"], ["v1"])
        tx.announce_build("v1", ["other@1"], [])  # another process of v1: kept together
    assert {b.build: b.runs for b in book.live()} == {
        "v1": frozenset({"booking@1", "other@1"}),
        "v2": frozenset({"booking@1"}),
    }
    # A run that does not exist gets no build: its message goes out unrouted.
    assert book.routed(NodeMessage("no-such-run", "booking", 1, "quote", 1, 1)).build is None
    run_id = orchestrator.submit("booking")
    message = NodeMessage(run_id, "booking", 1, "quote", 1, 1)
    assert book.routed(message).build == "v2"
    with store.reading() as tx:
        assert tx.run_build(run_id) == "v2"
        assert tx.start_run_on(run_id, "v1") == "v2"  # recorded once
    view = orchestrator.get_run(run_id)
    assert (view.build, view.waiting_for_build) == ("v2", None)
    assert book.waiting_runs() == {}


def test_a_pinned_run_whose_build_is_gone_waits_for_it(
    orchestrator: Orchestrator, wall_clock: FakeClock
) -> None:
    store = orchestrator.store
    with store.transaction() as tx:
        tx.announce_build("v1", ["booking@1"], [])
    run_id = orchestrator.submit("booking")
    assert (
        orchestrator.builds.routed(NodeMessage(run_id, "booking", 1, "quote", 1, 1)).build == "v1"
    )
    # v1's workers are gone (its row too old to be live); v2 does not take pinned runs.
    later = BuildBook(store, orchestrator.registry, Settings(build_announce_s=0.1))
    wall_clock.advance(0.5)
    with store.transaction() as tx:
        tx.announce_build("v2", ["booking@1"], ["v1"])
    assert later.waiting_for(run_id, orchestrator.registry.get("booking", 1)) == "v1"
    assert later.waiting_runs() == {("booking", "v1"): 1}
    assert later.routed(NodeMessage(run_id, "booking", 1, "quote", 1, 1)).build == "v1"


# -- recovery: the build's queue, and a run waiting for its build ----------------------


def test_recovery_asks_the_builds_queue_and_leaves_a_run_waiting_for_its_build(
    tmp_path: Path,
) -> None:
    runtime = Runtime.build(Settings(home=tmp_path / "home"))
    try:
        broker = Captured()
        runtime.orchestrator.publisher = broker
        runtime.orchestrator.registry.register(
            load_definition(parse_text(PINNED_YAML), resolve=False)
        )
        store, book = runtime.store, runtime.orchestrator.builds
        with store.transaction() as tx:
            tx.announce_build("v1", ["booking@1"], [])
        run_id = runtime.orchestrator.submit("booking")
        assert book.routed(NodeMessage(run_id, "booking", 1, "quote", 1, 1)).build == "v1"
        broker.messages.clear()  # its first dispatch (embedded: not routed)
        # Dispatched long ago, never claimed: lost, unless its build's queue holds it.
        with store.transaction() as tx:
            tx.connection.execute(
                update(executions)
                .where(executions.c.run_id == run_id)
                .values(dispatched_at=datetime.now(UTC) - timedelta(seconds=120))
            )
        broker.queued = {"cairn@v1": 1}
        assert runtime.scheduler.recover() == 0
        assert broker.asked == ["cairn@v1"]
        # v1's workers are gone: the node waits for one, whatever the queues say.
        with store.transaction() as tx:
            tx.connection.execute(
                update(builds).values(last_at=datetime.now(UTC) - timedelta(hours=1))
            )
        book.forget_live()
        broker.queued, broker.asked = {}, []
        assert runtime.scheduler.recover() == 0
        assert broker.asked == [] and broker.messages == []
        assert runtime.orchestrator.get_run(run_id).waiting_for_build == "v1"
        # A v1 worker again, its queue empty: the message was lost, and is sent again.
        with store.transaction() as tx:
            tx.announce_build("v1", ["booking@1"], [])
        book.forget_live()
        assert runtime.scheduler.recover() == 1
        (again,) = broker.messages
        assert (again.node, again.resumed) == ("quote", True)
    finally:
        runtime.close()
