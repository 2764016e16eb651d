"""Old runs must still read: the committed event logs replayed through today's decider.

Each file in ``logs/`` was recorded by ``python -m tests.golden.record`` from real runs on
the embedded engine. Every run's events are folded, from an empty state, through
:func:`cairn.decider.decide` — as the engine restores a run whose state is not cached —
and each decision must be what was recorded beside its event (status, transitions,
commands), the state after each snapshot's seq must be the snapshot, and the state after
the last event the run's final state. Every stored snapshot must still load.

A failure means a change to the decider, the events' format or the state's format would
make cairn misread runs already in somebody's database: a run restored from an old
snapshot and one replayed from its events would disagree, or an old event would no
longer parse. Fix the change; regenerate the logs only when the change is meant to alter
how old histories read (see README.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cairn.decider import decide
from cairn.definitions.loader import load_definition
from cairn.engine.plan import outcome_record
from cairn.engine.reads import AUDIT_ONLY, decided_under
from cairn.errors import CairnError
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import event_from_dict
from cairn.model.state import STATE_FORMAT, RunState
from tests.golden.record import CASES

LOGS = Path(__file__).resolve().parent / "logs"
FILES = sorted(LOGS.glob("*.json"))

REGENERATE = (
    "Runs recorded before this change no longer read as they did. If that is a bug, fix "
    "the change. If the change is meant to alter how old histories read (and what "
    "happens to runs already in the log is handled), regenerate the logs deliberately "
    "with `python -m tests.golden.record` and review `git diff tests/golden/logs` "
    "(see tests/golden/README.md)."
)


def _log(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _runs() -> list[Any]:
    return [
        pytest.param(path, run, id=f"{path.stem}[{index}]:{run['workflow']}")
        for path in FILES
        for index, run in enumerate(_log(path)["runs"])
    ]


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back: what the store keeps (tuples become lists)."""
    return json.loads(json.dumps(value))


def _differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as paths (the first few): for the failure message."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        found: list[str] = []
        for key in sorted(set(expected) | set(actual), key=str):
            if key not in actual:
                found.append(f"{path}.{key}: recorded {expected[key]!r}, now missing")
            elif key not in expected:
                found.append(f"{path}.{key}: not recorded, now {actual[key]!r}")
            else:
                found.extend(_differences(expected[key], actual[key], f"{path}.{key}"))
        return found[:10]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [
            d
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for d in _differences(e, a, f"{path}[{i}]")
        ][:10]
    return [] if expected == actual else [f"{path or '.'}: recorded {expected!r}, now {actual!r}"]


def _definition(log: Mapping[str, Any], name: str, version: int) -> WorkflowDefinition:
    """The run's definition as the registry reads a registered one back: leniently, under
    the format it was registered with."""
    (registered,) = [d for d in log["definitions"] if (d["name"], d["version"]) == (name, version)]
    return load_definition(
        registered["spec"],
        source=f"golden {name}@{version}",
        registered=True,
        implied_format=registered["format"],
    )


def test_every_case_has_a_committed_log() -> None:
    assert sorted(path.stem for path in FILES) == sorted(CASES), (
        "tests/golden/logs/ and the cases of tests/golden/record.py disagree: record a new "
        "case with `python -m tests.golden.record CASE` and commit its file"
    )


@pytest.mark.parametrize(("path", "run"), _runs())
def test_an_old_run_replays_to_what_was_recorded(path: Path, run: Mapping[str, Any]) -> None:
    log, name = _log(path), run["workflow"]
    snapshots = {snapshot["seq"]: snapshot for snapshot in run["snapshots"]}
    where = f"{path.name}, run {run['run_id']} ({name})"
    # A migrated run started on the version its first migration moved it from, and each
    # event is decided under the version it was on then (a migration: the one it moves to).
    migrations = [e["data"] for e in run["events"] if e["type"] == "run_migrated"]
    state = RunState(
        run["run_id"], name, migrations[0]["from_version"] if migrations else run["version"]
    )
    for entry in run["events"]:
        seq = entry["seq"]
        if not entry["type"].startswith(AUDIT_ONLY):  # history for people, not input
            try:
                event = event_from_dict(entry["data"])
                definition = _definition(log, name, decided_under(event, state))
                decision = decide(definition, state, event)
            except CairnError as refused:
                pytest.fail(
                    f"{where}: seq {seq} ({entry['type']}) is refused now: {refused}. {REGENERATE}"
                )
            assert event.type == entry["type"], f"{where}: seq {seq} is a {event.type} now"
            assert decision.ignored is None, (
                f"{where}: seq {seq} ({entry['type']}) is ignored now: {decision.ignored}. "
                f"{REGENERATE}"
            )
            outcome = _plain(outcome_record(decision))
            assert outcome == entry["outcome"], (
                f"{where}: the decision on seq {seq} ({entry['type']}) differs: "
                f"{_differences(entry['outcome'], outcome)}. {REGENERATE}"
            )
            state = decision.state
        if seq in snapshots:
            _assert_reads_as(snapshots[seq]["state"], state, f"{where}, snapshot at seq {seq}")
    _assert_reads_as(run["final_state"], state, f"{where}, final state")


@pytest.mark.parametrize(("path", "run"), _runs())
def test_every_stored_snapshot_still_loads(path: Path, run: Mapping[str, Any]) -> None:
    for snapshot in run["snapshots"]:
        assert snapshot["format"] <= STATE_FORMAT
        assert RunState.from_dict(snapshot["state"]).run_id == run["run_id"]


def _assert_reads_as(recorded: Mapping[str, Any], replayed: RunState, where: str) -> None:
    """The recorded state, read by today's code, is the state today's decider derives
    from the same events: a run restored from the snapshot and one replayed from its log
    go on alike. (Reading both through today's format lets a field added since, with its
    default, pass; a value that differs, or a recorded field that is lost, does not.)"""
    expected = _plain(RunState.from_dict(recorded).to_dict())
    actual = _plain(replayed.to_dict())
    assert actual == expected, f"{where} differs: {_differences(expected, actual)}. {REGENERATE}"
