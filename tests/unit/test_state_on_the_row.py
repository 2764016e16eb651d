"""What a step writes of the run's state (cairn.engine.plan): the state as JSON on the
run's row while it fits the cache, and in a snapshot when one is due — serialized for
them only, not at every step of a run whose state the row no longer holds. And what a
handler gets of it: a copy that shares nothing (cairn.model.payloads.json_copy)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cairn import Workflow
from cairn.config import Settings
from cairn.engine import plan as planning
from cairn.engine.inputs import FreshRun
from cairn.engine.plan import Planner
from cairn.model.events import NodeSucceeded, RunStarted
from cairn.model.outcomes import RunWrite
from cairn.model.payloads import json_bytes, json_copy, json_text
from cairn.model.state import RunState

LIMIT = 2_000


def noop(ctx: Any, state: dict[str, Any]) -> None:
    return None


def planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, note_bytes: int, cached: bool, seq: int
) -> tuple[RunWrite, str | None, int]:
    """The row's write and the snapshot of the step that ends node ``a`` with a note of
    ``note_bytes``, the run at ``seq`` (snapshots every 10 events, the last at seq 1), and
    how often the state was serialized."""
    definition = (
        Workflow("grow", version=1)
        .task("a", noop, next="b")
        .task("b", noop, next="c")
        .end("c")
        .build()
    )
    planner = Planner(Settings(home=tmp_path, state_cache_bytes=LIMIT, snapshot_every_events=10))
    row = FreshRun("r", datetime.now(UTC), "default", None)
    started = planner.plan(row, definition, RunState("r", "grow", 1), RunStarted(at=1.0))
    at_a = started[0].state
    serialized: list[int] = []
    dumps = planning.json_text

    def counting(value: Any) -> str:
        serialized.append(1)
        return dumps(value)

    monkeypatch.setattr(planning, "json_text", counting)
    later = FreshRun("r", row.created_at, "default", None, last_seq=seq, snapshot_seq=1,
                     snapshot_at=row.created_at)  # fmt: skip
    event = NodeSucceeded(at=2.0, node="a", output={"note": "x" * note_bytes})
    _decision, plan = planner.plan(later, definition, at_a, event, cached=cached)
    monkeypatch.undo()
    assert plan is not None
    return plan.run, plan.snapshot, len(serialized)


def test_a_state_that_fits_stays_on_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, snapshot, serialized = planned(tmp_path, monkeypatch, note_bytes=10, cached=True, seq=2)
    assert run.state_json is not None
    assert json.loads(run.state_json)["vars"]["note"] == "x" * 10
    assert (snapshot, serialized) == (None, 1)


def test_a_state_outgrowing_the_row_leaves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, snapshot, serialized = planned(tmp_path, monkeypatch, note_bytes=LIMIT, cached=True, seq=2)
    assert run.state_json is None and snapshot is None and serialized == 1


def test_a_state_the_row_did_not_hold_is_not_serialized_between_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, snapshot, serialized = planned(tmp_path, monkeypatch, note_bytes=10, cached=False, seq=2)
    assert run.state_json is None and snapshot is None
    assert serialized == 0  # an O(state) cost per step, gone


def test_at_a_snapshot_a_state_that_shrank_goes_back_on_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run, snapshot, serialized = planned(tmp_path, monkeypatch, note_bytes=10, cached=False, seq=11)
    assert snapshot is not None and run.state_json == snapshot and serialized == 1
    assert run.snapshot_seq == 12


def test_a_handlers_copy_of_the_state_shares_nothing_with_it() -> None:
    held = {"notes": ["a", {"deep": [1, 2.5, None, True]}], "n": 3, "s": {"k": "v"}}
    mine = json_copy(held)
    assert mine == held
    mine["notes"][1]["deep"].append("changed")
    mine["s"]["k"] = "changed"
    mine["notes"].append("more")
    assert held == {"notes": ["a", {"deep": [1, 2.5, None, True]}], "n": 3, "s": {"k": "v"}}
    odd = {"pair": (1, [2]), "kinds": {1, 2}}  # not JSON: deep-copied all the same
    theirs = json_copy(odd)
    theirs["pair"][1].append(3)
    theirs["kinds"].add(3)
    assert odd == {"pair": (1, [2]), "kinds": {1, 2}}


def test_the_state_written_reads_back_as_json_dumps_would_have_written_it() -> None:
    """The fast encoder a step's state and event go through writes what ``json.dumps``
    did: integer keys as strings, tuples as lists, text as it is — and an integer past
    64 bits, which it refuses, through ``json.dumps``."""
    value = {
        "n": 3,
        "f": 2.5,
        "pair": (1, "b"),
        "by_id": {7: "seven"},
        "text": "grüß 🌍",
        "x": None,
    }
    assert json.loads(json_text(value)) == json.loads(json.dumps(value))
    huge = {"big": 2**70, "list": [1, 2]}
    assert json.loads(json_bytes(huge)) == huge
