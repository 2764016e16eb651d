"""Property tests of anomaly detection.

The detectors against brute-force oracles and against runs that make progress (never
caught, however long and however periodic their path); and the decider's properties
(only legal transitions, every move a row of the transition table, the same decision from
the state reloaded from JSON, every run ends) on random valid definitions with a random
``anomaly:`` block — whose detectors fire often there, since random outputs repeat.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from cairn.decider.anomaly import cleared, observe, repeating_block, returns
from cairn.definitions.loader import load_definition
from cairn.model.definition import (
    AnomalyPolicy,
    NoProgressRule,
    OscillationRule,
    PingPongRule,
)
from cairn.model.state import AnomalyTrack
from cairn.model.statuses import RunStatus
from tests.unit.test_decider_properties import (
    WORKER_WEIGHTS,
    Simulator,
    definition_specs,
    outputs,
    random_step,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

EXAMPLES = int(os.environ.get("DECIDER_PROPERTY_EXAMPLES", "300"))
FAST = settings(max_examples=EXAMPLES, deadline=None)

calls = st.lists(st.sampled_from("ABC"), max_size=24)


def oracle_block(sequence: Sequence[str], max_period: int, repeats: int) -> tuple[str, ...] | None:
    """The definition, literally: the shortest period whose block, repeated, is the tail."""
    for period in range(2, max_period + 1):
        span = period * repeats
        if len(sequence) >= span:
            block = tuple(sequence[-period:])
            if tuple(sequence[-span:]) == block * repeats and len(set(block)) > 1:
                return tuple(sequence[-span:][:period])
    return None


@FAST
@given(calls, st.integers(2, 5), st.integers(2, 4))
def test_repeating_block_agrees_with_its_definition(
    sequence: list[str], max_period: int, repeats: int
) -> None:
    assert repeating_block(sequence, max_period, repeats) == oracle_block(
        sequence, max_period, repeats
    )


@FAST
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from("abc")), max_size=20))
def test_returns_count_revisits(raw: list[tuple[int, str]]) -> None:
    changes = []
    for step, (_gap, value) in enumerate(raw):
        if not changes or changes[-1][1] != value:
            changes.append((step, value))
    count = returns(changes)
    assert count == len(changes) - len({value for _step, value in changes})


EVERYTHING = AnomalyPolicy(
    no_progress=NoProgressRule(steps=1),
    ping_pong=PingPongRule(max_period=8, repeats=2),
    oscillation=OscillationRule(fields=("progress",), window=200, returns=1),
)


@FAST
@given(st.lists(st.sampled_from(["think", "act", "observe", "answer"]), max_size=120))
def test_a_run_that_makes_progress_is_never_caught(path: list[str]) -> None:
    """Whatever the path (periodic, a self-loop, one node for ever), a state that is new
    at every move is progress — even to the most sensitive settings there are."""
    track: AnomalyTrack | None = None
    for step, node in enumerate(path):
        track, found = observe(EVERYTHING, track, {"progress": step}, {}, node)
        assert found is None, (step, found)


@FAST
@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=6, unique=True),
    st.integers(1, 8),
)
def test_a_loop_without_progress_is_caught_as_soon_as_it_has_gone_round(
    loop: list[str], steps: int
) -> None:
    policy = AnomalyPolicy(no_progress=NoProgressRule(steps=steps))
    track: AnomalyTrack | None = None
    caught = None
    for move in range(1, 60):
        node = loop[(move - 1) % len(loop)]
        track, found = observe(policy, track, {"same": True}, {}, node)
        if found is not None:
            caught = move
            break
    # `steps` unchanged moves after the first, and at least one node seen twice.
    assert caught == max(steps + 1, len(loop) + 1)
    assert track is not None and cleared(track).trail == ()


# -- the decider's properties with an anomaly block ----------------------------------------

FIELDS = ["flag", "color", "n", "route_key", "x"]


HANDLERS = "tests.unit.property_handlers"


@st.composite
def loop_specs(draw: Callable[..., Any]) -> dict[str, Any]:
    """A loop the drain goes round: s0 -> ... -> gate, where the gate goes back to some
    s_j until a result sets ``flag`` (which the drain's empty results never do). Its
    nodes are tasks (some pure decisions, some compensable), waits and fan-outs."""
    n = draw(st.integers(1, 4), label="loop length")
    nodes: dict[str, dict[str, Any]] = {}
    for i in range(n):
        following = f"s{i + 1}" if i + 1 < n else "gate"
        kind = draw(st.sampled_from(["task", "task", "decision", "wait", "parallel"]))
        if kind == "task":
            body: dict[str, Any] = {"handler": f"{HANDLERS}:work", "next": following}
            if draw(st.booleans()):
                body["compensate"] = f"{HANDLERS}:undo"
        elif kind == "decision":  # pure: no handler, the decider follows it at once
            cases = {"true": following, "false": following}
            body = {"branch": {"guard": f"{HANDLERS}:flag_guard", "cases": cases}}
        elif kind == "wait":
            body = {
                "wait": {
                    "signals": {"approve": following, "reject": "stopped"},
                    "timeout": "1h",
                    "on_timeout": following,
                }
            }
        else:
            branches = [f"s{i}b{j}" for j in range(draw(st.integers(1, 3)))]
            body = {"parallel": branches, "next": following}
            for branch in branches:
                nodes[branch] = {"handler": f"{HANDLERS}:work"}
        nodes[f"s{i}"] = body
    back = f"s{draw(st.integers(0, n - 1))}"
    nodes["gate"] = {
        "branch": {"guard": f"{HANDLERS}:flag_guard", "cases": {"true": "done", "false": back}}
    }
    if draw(st.booleans()):
        nodes["gate"]["handler"] = f"{HANDLERS}:work"
    nodes[back]["max_visits"] = draw(st.integers(3, 12))
    nodes["done"] = {"end": "succeeded"}
    if any("wait" in body for body in nodes.values()):
        nodes["stopped"] = {"end": "failed"}
    return {"name": "looping", "version": 1, "start": "s0", "nodes": nodes}


@st.composite
def watched_specs(draw: Callable[..., Any]) -> dict[str, Any]:
    spec: dict[str, Any] = draw(definition_specs() | loop_specs(), label="definition")
    # Longer loops than the generator's: more moves for the detectors to see.
    for body in spec["nodes"].values():
        if "max_visits" in body:
            body["max_visits"] = draw(st.integers(3, 8))
    if "max_visits" in spec:
        spec["max_visits"] = draw(st.integers(3, 8))
    anomaly: dict[str, Any] = {}
    kinds = draw(st.sets(st.sampled_from(["no_progress", "ping_pong", "oscillation"]), min_size=1))
    if "no_progress" in kinds:
        anomaly["no_progress"] = draw(st.just(True) | st.builds(dict, steps=st.integers(1, 4)))
    if "ping_pong" in kinds:
        anomaly["ping_pong"] = draw(
            st.just(True) | st.builds(dict, max_period=st.integers(2, 3), repeats=st.integers(2, 3))
        )
    if "oscillation" in kinds:
        anomaly["oscillation"] = {
            "fields": draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2, unique=True)),
            "window": draw(st.integers(2, 12)),
            "returns": draw(st.integers(1, 3)),
        }
    if draw(st.booleans(), label="fingerprint fields"):
        anomaly["fingerprint"] = {
            "fields": draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)),
            "ignore": draw(st.lists(st.sampled_from(FIELDS), max_size=1)),
        }
    on_detect: dict[str, Any] = {"interventions": draw(st.integers(0, 2))}
    if draw(st.booleans(), label="hint"):
        on_detect["hint"] = "stuck: {kind}"
    reset = draw(st.sampled_from([None, ["x", "n"], {"color": "red", "x": None}]))
    if reset is not None:
        on_detect["reset"] = reset
    waits = [node for node, body in spec["nodes"].items() if "wait" in body]
    if waits and draw(st.booleans(), label="hand-off"):
        on_detect["then"] = f"wait:{draw(st.sampled_from(sorted(waits)))}"
        # Hand-off edges close new loops (into the wait and back): bound them all.
        spec.setdefault("max_visits", 4)
    anomaly["on_detect"] = on_detect
    spec["anomaly"] = anomaly
    return spec


class TogglingSimulator(Simulator):
    """The simulator, whose drain's results (when ``toggle``) flip ``x`` between two
    values: a loop that oscillates instead of standing still."""

    toggle = False

    def succeed(self, key: Any, output: dict[str, Any] | None = None, **context: Any) -> Any:
        if output is None and self.toggle:
            output = {"x": self.decisions % 2}
        return super().succeed(key, output, **context)


WATCHED = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    report_multiple_bugs=False,
)


@WATCHED
@given(data=st.data())
def test_watched_runs_keep_every_run_legal_deterministic_and_terminating(
    data: st.DataObject,
) -> None:
    spec = data.draw(watched_specs())
    definition = load_definition(spec)  # a spec that does not load is a generator bug
    sim = TogglingSimulator(definition)
    sim.toggle = data.draw(st.booleans(), label="toggling results")
    # Fewer cancels than the decider's own property: a cancelled run stops moving, and
    # moves are what the detectors watch.
    weights = {**WORKER_WEIGHTS, "cancel": data.draw(st.sampled_from([0, 0, 1]), label="cancels")}
    try:
        sim.start(data.draw(outputs, label="input"))
        # Half the runs go straight to the drain, where nothing changes the state: the
        # loops they take are the ones the detectors are there for.
        steps = data.draw(st.sampled_from([0, 0, 0, 10, 30, 60]), label="random steps")
        for _ in range(steps):
            if sim.state.status.terminal:
                break
            random_step(sim, data, weights)
        sim.drain()
        assert sim.state.status.terminal
        for record in sim.state.anomalies:
            event(f"anomaly: {record['kind']} {record['action']}")
        event(f"final: {sim.state.status}")
        if sim.state.reason and sim.state.reason.startswith("anomaly:"):
            assert sim.state.status in (RunStatus.FAILED, RunStatus.COMPENSATED)
            assert sim.state.anomalies[-1]["action"] == "failed"
        # Interventions per kind never exceed what the definition allows.
        assert definition.anomaly is not None
        track = sim.state.anomaly
        if track is not None:
            assert all(n <= definition.anomaly.interventions for n in track.interventions.values())
    finally:
        note(sim.describe_trace())
