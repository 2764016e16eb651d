"""Property tests of the decider: random event sequences fed to random valid definitions.

The property (from the issue): no illegal transition ever happens, and every run that
receives its events ends terminal. Concretely, after *every* call of ``decide``:

* the input state is unchanged, and an event that is refused raises a typed
  :class:`~cairn.errors.CairnError` (never ``KeyError``, ``AssertionError``, ...);
* run and node-execution status changes are rows of ``RUN_TRANSITIONS`` /
  ``NODE_TRANSITIONS``; every recorded move is a row of ``transition_table``;
* the commands agree with the state (armed timers, dispatches, ``FinishRun``), and
  ``CancelNode`` / ``DetachNode`` only name executions that were dispatched;
* a terminal run has no timers and nothing running, and stays as it is;
* the state round-trips through ``to_dict`` / JSON / ``from_dict``, and the state
  reloaded from its JSON decides the same event exactly alike (as after a restart).

Then a fair drain (every dispatched execution succeeds, waits get a declared signal,
timers fire in due order) must bring the run to a terminal status.

The simulator plays the outside world: the workers (results of dispatched executions,
acknowledged cancellations, redelivered results), the timer scheduler, and users
(signals, cancel requests). It only learns what to do from the commands it is given.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from cairn.decider.graph import Decision, decide
from cairn.definitions.loader import load_definition, load_file
from cairn.definitions.transitions import transition_table
from cairn.errors import CairnError, IllegalTransition, NotWaiting, UnknownNode, UnknownSignal
from cairn.model.awaiting import RECOVERY_SIGNALS
from cairn.model.commands import (
    ArmTimer,
    CancelNode,
    DetachNode,
    DisarmTimer,
    Dispatch,
    FinishRun,
)
from cairn.model.definition import (
    ErrorClass,
    ParallelNode,
    TaskNode,
    WaitNode,
    WorkflowDefinition,
)
from cairn.model.events import (
    CancelRequested,
    Event,
    NodeCancelled,
    NodeFailed,
    NodeSucceeded,
    Phase,
    RunStarted,
    SignalReceived,
    TimerFired,
)
from cairn.model.state import RunState
from cairn.model.statuses import NODE_TRANSITIONS, RUN_TRANSITIONS, NodeStatus, RunStatus
from tests.unit.property_handlers import COLORS, GUARD_LABELS

# When a property fails, Hypothesis's report imports libcst, which warns about
# mypy_extensions.TypedDict; with warnings as errors that would hide the failure.
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

ROOT = Path(__file__).resolve().parents[2]
BOOK_FLIGHT = ROOT / "examples" / "book_flight.yaml"

HANDLERS = "tests.unit.property_handlers"
WORK = f"{HANDLERS}:work"
UNDO = f"{HANDLERS}:undo"
SIGNAL_NAMES = ("approve", "reject", "more")
ROUTE_VALUES = ("a", "b", "1", "true")
DRAIN_BOUND = 2_000

# ---------------------------------------------------------------------------------------
# Random valid definitions
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _sampled(options: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(options)


def sampled(options: Sequence[Any]) -> st.SearchStrategy[Any]:
    """``st.sampled_from``, built once per distinct option list: building strategies
    afresh for every draw made shrinking a failing example several times slower."""
    return _sampled(tuple(options))


@functools.lru_cache(maxsize=1024)
def ints(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


OPTIONAL_VISITS = st.none() | st.integers(2, 4)
END_STATUSES = st.lists(
    st.sampled_from(["succeeded", "failed", "cancelled"]), min_size=1, max_size=3
)
ERROR_CLASSES = st.sets(st.sampled_from([c.value for c in ErrorClass]), min_size=1)
ROUTE_TABLES = st.lists(st.sampled_from(ROUTE_VALUES), unique=True, min_size=1)
SIGNAL_SETS = st.lists(st.sampled_from(SIGNAL_NAMES), unique=True, min_size=1)
RETRY_POLICIES = (
    {"attempts": 1},
    {"attempts": 2, "backoff": "1s"},
    {"attempts": 3, "backoff": "100ms", "max_delay": "1s", "jitter": "none"},
    {"attempts": 4, "backoff": "10s", "max_delay": "5m"},
    {"attempts": 3, "backoff": "1s", "deadline": "2s"},
    {"attempts": 4, "backoff": "100ms", "deadline": "1h", "jitter": "none"},
)
TIMEOUTS = ("1s", "30s", "10m")
# Few, coarse choices: every choice is one more thing the shrinker tries to minimise,
# and a failing example is re-run for each try. Zero always means "nothing extra".
RETRY, TIMEOUT, COMPENSATE, ON_ERROR = 1, 2, 4, 8


@st.composite
def definition_specs(draw: Callable[..., Any]) -> dict[str, Any]:
    """A file-form definition that passes validation by construction.

    A backbone ``s0 -> s1 -> ... -> s(n-1) -> e0`` guarantees reachability and a path to
    an end: every backbone node has one "main" edge to its successor. Other edges go
    forward (to a later backbone node or an end), or back to an earlier (or the same)
    backbone node, whose ``max_visits`` (or the workflow's) then bounds every loop
    through it: a loop in this graph needs a back edge, and its target is in the loop.
    Detour nodes (like ``escalate -> approval`` in the example) hang off any edge;
    parallel branches are extra task nodes reachable only through their fan-out.
    """
    n = draw(ints(1, 5), label="backbone length")
    backbone = [f"s{i}" for i in range(n)]
    end_statuses = draw(END_STATUSES, label="end statuses")
    ends = [f"e{k}" for k in range(len(end_statuses))]
    workflow_max_visits = draw(OPTIONAL_VISITS, label="workflow max_visits")
    nodes: dict[str, dict[str, Any]] = {}
    limits: dict[str, int] = {}
    detours = 0

    def main(i: int) -> str:
        return backbone[i + 1] if i + 1 < n else ends[0]

    def target(i: int, *, detour_ok: bool = True) -> str:
        nonlocal detours
        roll = draw(ints(0, 9))
        if roll in (1, 2):  # back edge (0 stays forward: the simplest)
            back = backbone[draw(ints(0, i))]
            if workflow_max_visits is None:
                limits.setdefault(back, draw(ints(1, 3)))
            return back
        if roll == 3 and detour_ok:
            detour = f"d{detours}"
            detours += 1
            spec: dict[str, Any] = {"next": target(i, detour_ok=False)}
            spec.update(common(i, draw(ints(0, 31)), handler=True))
            nodes[detour] = spec
            return detour
        return draw(sampled(backbone[i + 1 :] + ends))

    def common(i: int, extras: int, *, handler: bool = False) -> dict[str, Any]:
        """``extras`` 0-15 picks retry/timeout/compensate/on_error; 16-23 is just a
        retry policy; 24+ adds nothing."""
        spec: dict[str, Any] = {"handler": WORK} if handler else {}
        extras = extras if extras < 16 else RETRY if extras < 24 else 0
        if extras & RETRY:
            spec["retry"] = dict(RETRY_POLICIES[draw(ints(0, len(RETRY_POLICIES) - 1))])
        if extras & TIMEOUT:
            spec["timeout"] = draw(sampled(TIMEOUTS))
        if extras & COMPENSATE:
            spec["compensate"] = UNDO
        if extras & ON_ERROR:
            spec["on_error"] = {c: target(i) for c in sorted(draw(ERROR_CLASSES))}
        return spec

    def slotted(i: int, slots: list[str]) -> dict[str, str]:
        """Give one slot the main edge, the others random targets."""
        main_slot = draw(sampled(slots))
        return {slot: main(i) if slot == main_slot else target(i) for slot in slots}

    for i, node_id in enumerate(backbone):
        kind = draw(
            sampled(["next", "branch", "route", "wait", "parallel", "next", "branch"]),
            label=f"{node_id} kind",
        )
        spec: dict[str, Any] = {}
        if kind in ("next", "branch", "route"):
            # 0-31: a handler and common() extras; 32-39: a pure decision node (no
            # handler: the decider follows its edge at once), with extras 0-7. A bare
            # ``next`` decides nothing, so it always runs a handler.
            extras = draw(ints(0, 39))
            spec.update(common(i, extras % 32, handler=extras < 32 or kind == "next"))
            if kind == "next":
                spec["next"] = main(i)
            elif kind == "branch":
                guard = draw(sampled(["flag_guard", "color_guard", "parity_guard", "picky_guard"]))
                spec["branch"] = {
                    "guard": f"{HANDLERS}:{guard}",
                    "cases": slotted(i, list(GUARD_LABELS[guard])),
                }
            else:
                values = draw(ROUTE_TABLES)
                edges = slotted(i, [*values, "(default)"])
                default = edges.pop("(default)")
                spec["route"] = {"key": "route_key", "table": edges, "default": default}
        elif kind == "wait":
            names = draw(SIGNAL_SETS)
            edges = slotted(i, [*names, "(timeout)"])
            on_timeout = edges.pop("(timeout)")
            how = draw(ints(0, 5))
            timeout = ("10s", "5m", "24h")[how % 3]
            wait: dict[str, Any] = {"signals": edges, "on_timeout": on_timeout}
            if how < 3:
                wait["timeout"] = timeout
            else:
                spec["timeout"] = timeout  # a node-level timeout is the wait's timeout
            spec["wait"] = wait
        else:
            count = draw(ints(1, 3))
            branches = [f"{node_id}b{j}" for j in range(count)]
            policy = draw(sampled(["all", "quorum", "critical"]))
            join: dict[str, Any] = {"policy": policy}
            if policy == "quorum":
                join["k"] = draw(ints(1, count))
            elif policy == "critical":
                join["critical"] = draw(st.lists(sampled(branches), unique=True, min_size=1))
            how = draw(ints(0, 11))
            if how % 4 >= 2:
                join["timeout"] = ("5s", "1h")[how % 2]
            if how >= 4:
                join["rest"] = ("cancel", "finish")[how // 8]
            spec.update({"parallel": branches, "join": join, "next": main(i)})
            if draw(ints(0, 3)) == 3:
                spec["on_error"] = {"permanent": target(i)}
            for branch in branches:
                # 0-31: common() extras; 32-47: a default, and extras 0-15.
                extras = draw(ints(0, 47))
                # No on_error: a branch's failure goes to its join.
                branch_spec = common(i, extras % 32 & ~ON_ERROR, handler=True)
                if extras >= 32:
                    branch_spec["default"] = {"color": COLORS[extras % 3]}
                nodes[branch] = branch_spec
        nodes[node_id] = spec

    for node_id, limit in limits.items():
        nodes[node_id]["max_visits"] = limit
    referenced = set(_strings(nodes))
    for end_id, status in zip(ends, end_statuses, strict=True):
        if end_id in referenced:
            nodes[end_id] = {"end": status}
    spec = {"name": "prop", "version": 1, "start": backbone[0], "nodes": nodes}
    if workflow_max_visits is not None:
        spec["max_visits"] = workflow_max_visits
    how = draw(ints(0, 5), label="cancel options")
    if how % 2:
        spec["compensate_on_cancel"] = True
    if how >= 2:
        spec["cancel_timeout"] = ("1s", "1m")[how // 4]
    return spec


outputs = st.dictionaries(
    sampled(["flag", "color", "n", "route_key", "boom", "x"]),
    st.one_of(
        st.booleans(),
        ints(0, 3),
        sampled([*COLORS, "purple", *ROUTE_VALUES, "c"]),
        st.none(),
    ),
    max_size=3,
)

# Mostly transient failures: they are what makes the retry and deadline paths run.
error_classes = sampled([ErrorClass.TRANSIENT] * 3 + [ErrorClass.PERMANENT, ErrorClass.BUSINESS])

# What a handler adds to the agent context (messages, tool sessions; None closes one).
contexts = st.one_of(
    st.just(((), None)),
    st.tuples(
        st.lists(
            st.fixed_dictionaries(
                {"role": sampled(["tool", "assistant"]), "content": sampled(["ok"])}
            ),
            max_size=2,
        ).map(tuple),
        st.dictionaries(sampled(["browser", "db"]), st.none() | sampled(["cursor-1", "page-2"])),
    ),
)

# ---------------------------------------------------------------------------------------
# The simulator
# ---------------------------------------------------------------------------------------

RESULT_EVENTS = (NodeSucceeded, NodeFailed, NodeCancelled)
Key = tuple[str, int, int, Phase]  # (node, iteration, attempt, phase) of a dispatch


def _json(state: RunState) -> str:
    """The state as JSON text, as a store would write it (keys in the state's order,
    which decides e.g. the order of commands): a snapshot sharing nothing with it."""
    return json.dumps(state.to_dict())


def execution_key(event: NodeSucceeded | NodeFailed | NodeCancelled) -> Key:
    return (event.node, event.iteration, event.attempt, event.phase)


def _brief(event: Event) -> str:
    fields = {k: v for k, v in vars(event).items() if k != "at" and v not in (None, "", {})}
    return f"{type(event).__name__}(at={event.at:g}, {fields})"


@dataclass
class Simulator:
    """Feeds events to ``decide`` and checks every invariant after every call."""

    definition: WorkflowDefinition
    state: RunState = field(init=False)
    at: float = 1_000.0
    outstanding: dict[Key, None] = field(default_factory=dict)  # insertion-ordered set
    dispatched: set[Key] = field(default_factory=set)
    timers: dict[str, float] = field(default_factory=dict)  # what the commands armed
    dead_timers: set[str] = field(default_factory=set)  # fired, ignored, still in the state
    ever_armed: list[str] = field(default_factory=list)
    history: list[Event] = field(default_factory=list)
    decisions: int = 0
    rejected: int = 0
    ignored: int = 0
    trace: list[tuple[Event, Decision | CairnError]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = RunState("run-1", self.definition.name, self.definition.version)
        self.snapshot = _json(self.state)
        rows = transition_table(self.definition)
        self.table = {(row.source, row.event, row.target) for row in rows}

    # -- delivering one event -------------------------------------------------------------

    def tick(self, seconds: float = 1.0) -> float:
        self.at += seconds
        return self.at

    def deliver(self, event: Event) -> Decision | CairnError:
        """Decide ``event``; check every invariant; keep the new state (or the old one)."""
        old = self.state
        before = self.snapshot  # old's JSON as it was when old was decided
        self.history.append(event)
        self.decisions += 1
        replica = self.replay(before, event)
        refused: CairnError | None = None
        try:
            decision = decide(self.definition, old, event)
        except CairnError as exc:
            refused = exc
        except Exception as exc:
            raise AssertionError(
                f"decide() raised untyped {type(exc).__name__} ({exc}) for {_brief(event)}"
            ) from exc
        assert _json(old) == before, f"decide() modified its input state on {_brief(event)}"
        if refused is not None:
            self.rejected += 1
            self.trace.append((event, refused))
            assert replica == type(refused).__name__, f"reloaded from JSON it gives {replica}"
            if isinstance(event, RESULT_EVENTS) and execution_key(event) in self.outstanding:
                raise AssertionError(
                    f"the result of dispatched execution {execution_key(event)} was refused: "
                    f"{type(refused).__name__}: {refused}"
                )
            return refused  # the run keeps its old state
        self.trace.append((event, decision))
        assert replica == self.outcome(decision), (
            f"the state reloaded from its JSON decides differently: {replica}"
        )
        self.check(old, decision, event, before)
        self.state = decision.state
        if isinstance(event, NodeSucceeded | NodeFailed) or (
            isinstance(event, NodeCancelled) and event.phase is Phase.RUN
        ):
            # The worker has reported; compensations are never cancelled (the decider
            # ignores such an acknowledgement), so they stay in flight until a result.
            self.outstanding.pop(execution_key(event), None)
        return decision

    def replay(self, snapshot: str, event: Event) -> object:
        """The same event decided on the state reloaded from its JSON, as a store would:
        a pure decider must decide exactly alike (or refuse with the same error)."""
        try:
            reloaded = RunState.from_dict(json.loads(snapshot))
            return self.outcome(decide(self.definition, reloaded, event))
        except Exception as exc:
            return type(exc).__name__

    @staticmethod
    def outcome(decision: Decision) -> object:
        return (_json(decision.state), decision.commands, decision.transitions, decision.ignored)

    # -- the invariants -------------------------------------------------------------------

    def check(self, old: RunState, decision: Decision, event: Event, before: str) -> None:
        new = decision.state
        if decision.ignored is not None:
            self.ignored += 1
            assert _json(new) == before, "an ignored event must leave the state as it was"
            assert not decision.commands, "an ignored event must not command anything"
            assert not decision.transitions
            if isinstance(event, TimerFired) and event.timer_id in self.timers:
                self.dead_timers.add(event.timer_id)
            return
        assert new is not old, "a decision's state must be a new object"
        assert not old.status.terminal, (
            f"a {old.status} run accepted {_brief(event)}: it must stay as it is"
        )
        # Run status: a row of RUN_TRANSITIONS (or unchanged).
        assert new.status == old.status or new.status in RUN_TRANSITIONS[old.status], (
            f"run status {old.status} -> {new.status} is not in RUN_TRANSITIONS"
        )
        # Node executions: same (node, iteration) moves along NODE_TRANSITIONS.
        for node_id, prev in old.nodes.items():
            after = new.nodes.get(node_id)
            assert after is not None, f"node {node_id} disappeared from the state"
            assert after.iteration >= prev.iteration, f"{node_id}'s iteration went back"
            if after.iteration == prev.iteration:
                assert after.status == prev.status or (
                    after.status in NODE_TRANSITIONS[prev.status]
                ), f"node {node_id}#{after.iteration}: {prev.status} -> {after.status}"
        for node_id, visits in old.visits.items():
            assert new.visits.get(node_id, 0) >= visits
        old_comp = old.compensation.current if old.compensation else None
        new_comp = new.compensation.current if new.compensation else None
        same = old_comp and new_comp and old_comp.node == new_comp.node
        if same and old_comp.iteration == new_comp.iteration:
            assert new_comp.status == old_comp.status or (
                new_comp.status in NODE_TRANSITIONS[old_comp.status]
            ), f"compensation {new_comp.node}: {old_comp.status} -> {new_comp.status}"
        # Every move is a row of the workflow's own transition table.
        for move in decision.transitions:
            assert (move.source, move.label, move.target) in self.table, (
                f"transition {move} is not a row of transition_table()"
            )
        # Commands agree with the state.
        if isinstance(event, TimerFired):
            self.timers.pop(event.timer_id, None)
        finishes = [c for c in decision.commands if isinstance(c, FinishRun)]
        for command in decision.commands:
            if isinstance(command, ArmTimer):
                assert command.due_at >= event.at, f"{command} is due before {event.at}"
                self.timers[command.timer_id] = command.due_at
                self.dead_timers.discard(command.timer_id)
                self.ever_armed.append(command.timer_id)
            elif isinstance(command, DisarmTimer):
                assert self.timers.pop(command.timer_id, None) is not None, (
                    f"{command}: that timer is not armed"
                )
                self.dead_timers.discard(command.timer_id)
            elif isinstance(command, Dispatch):
                key = (command.node, command.iteration, command.attempt, command.phase)
                assert key not in self.dispatched, f"{command} was dispatched before"
                node = self.definition.nodes[command.node]
                if command.phase is Phase.RUN:
                    assert isinstance(node, TaskNode), f"{command}: not a task"
                    assert node.handler is not None, f"{command}: nothing to run"
                else:
                    assert node.compensate is not None, f"{command}: no compensation"
                self.dispatched.add(key)
                self.outstanding[key] = None
            elif isinstance(command, CancelNode | DetachNode):
                # A worker can only stop (a reconciler only detach) what it was given.
                key = (command.node, command.iteration, command.attempt, Phase.RUN)
                assert key in self.dispatched, (
                    f"{command} names an execution that was never dispatched"
                )
        assert self.timers == {t.timer_id: t.due_at for t in new.timers.values()}, (
            f"armed timers per commands {sorted(self.timers)} != state {sorted(new.timers)}"
        )
        if new.status.terminal:
            assert len(finishes) == 1, f"ending {new.status} needs one FinishRun: {finishes}"
            assert finishes[0].status == new.status
            assert not new.timers, f"a {new.status} run still has timers {sorted(new.timers)}"
            assert not new.active_nodes, f"a {new.status} run still runs {new.active_nodes}"
            assert new.compensation is None, f"a {new.status} run is still compensating"
            unfinished = [s for s in new.nodes.values() if not s.status.terminal]
            assert not unfinished, f"a {new.status} run has unfinished nodes {unfinished}"
        else:
            assert not finishes, f"{finishes} but the run is {new.status}"
        # The state is plain data.
        self.snapshot = _json(new)
        assert RunState.from_dict(json.loads(self.snapshot)) == new, "state round trip"

    def coverage(self) -> set[str]:
        """What this run went through, for ``--hypothesis-show-statistics``."""
        seen = set()
        for event_, outcome in self.trace:
            if isinstance(outcome, CairnError):
                seen.add(f"refused: {type(outcome).__name__}")
            elif outcome.ignored:
                seen.add(f"ignored: {type(event_).__name__}")
            else:
                seen.update(f"move: {t.label.split(':')[0]}" for t in outcome.transitions)
                seen.update(f"command: {type(c).__name__}" for c in outcome.commands)
                if isinstance(event_, TimerFired):
                    seen.add(f"timer fired: {event_.timer_id.split(':')[0]}")
        return seen

    def describe_trace(self) -> str:
        lines = []
        for event_, outcome in self.trace:
            if isinstance(outcome, CairnError):
                result = f"refused {type(outcome).__name__}: {outcome}"
            elif outcome.ignored:
                result = f"ignored ({outcome.ignored})"
            else:
                result = f"{outcome.state.status}; {list(outcome.commands)}"
            lines.append(f"{_brief(event_)} -> {result}")
        return "\n".join(lines)

    # -- what the outside world sends -----------------------------------------------------

    def start(self, inputs: dict[str, Any] | None = None) -> Decision | CairnError:
        return self.deliver(RunStarted(self.tick(), input=inputs or {}))

    def succeed(
        self, key: Key, output: dict[str, Any] | None = None, **context: Any
    ) -> Decision | CairnError:
        node, iteration, attempt, phase = key
        return self.deliver(
            NodeSucceeded(
                self.tick(), node, iteration, attempt, output=output, phase=phase, **context
            )
        )

    def fail(self, key: Key, error_class: ErrorClass) -> Decision | CairnError:
        node, iteration, attempt, phase = key
        return self.deliver(
            NodeFailed(self.tick(), node, iteration, attempt, error_class, "failed", phase=phase)
        )

    def fire(self, timer_id: str) -> Decision | CairnError:
        self.at = max(self.at, self.timers.get(timer_id, self.at))
        return self.deliver(TimerFired(self.tick(0.001), timer_id=timer_id))

    def signal(self, name: str, signal_id: str = "", **fields: Any) -> Decision | CairnError:
        return self.deliver(SignalReceived(self.tick(), name=name, signal_id=signal_id, **fields))

    def waiting_signals(self) -> list[str]:
        waiting = self.state.waiting_on
        if self.state.status is not RunStatus.WAITING or waiting is None:
            return []
        node = self.definition.nodes[waiting.node]
        assert isinstance(node, WaitNode)
        return sorted(node.signals)

    def find(self, node: str, phase: Phase = Phase.RUN) -> Key:
        """The one outstanding execution of ``node`` (for the example tests)."""
        keys = [k for k in self.outstanding if k[0] == node and k[3] is phase]
        assert len(keys) == 1, f"outstanding {node}: {keys} (all: {list(self.outstanding)})"
        return keys[0]

    # -- the fair drain -------------------------------------------------------------------

    def drain(self, bound: int = DRAIN_BOUND) -> int:
        """Let every execution succeed, answer waits, fire timers in due order."""
        for step in range(bound):
            if self.state.status.terminal:
                return step
            if self.outstanding:
                key = next(iter(self.outstanding))
                self.outstanding.pop(key)
                self.succeed(key)
                continue
            names = self.waiting_signals()
            if names:
                self.signal(names[0], signal_id=f"drain-{step}")
                continue
            if self.state.held:  # a person settles it: it happened
                held, _phase = self.state.held[0]
                self.signal("recovery.complete", f"drain-{step}", wait=held.node)
                continue
            live = {t: due for t, due in self.timers.items() if t not in self.dead_timers}
            if live:
                self.fire(min(live, key=lambda t: (live[t], t)))
                continue
            raise AssertionError(
                f"the run is stuck {self.state.status}: nothing dispatched, no wait, no live "
                f"timer (dead timers: {sorted(self.dead_timers)}); nodes {self.state.nodes}"
            )
        raise AssertionError(f"the run is still {self.state.status} after {bound} decisions")


# ---------------------------------------------------------------------------------------
# Random event sequences
# ---------------------------------------------------------------------------------------

# Weighted by repetition: mostly progress, with enough failures, cancels and noise.
WORKER_WEIGHTS = {
    "succeed": 20,
    "fail": 6,
    "fire": 10,
    "signal": 8,
    "operator": 4,
    "redeliver": 4,
    "ack_cancel": 2,
    "bad_signal": 2,
    "dup_signal": 2,
    "stale_timer": 2,
    "pause": 2,
    "cancel": 2,
}
SWARM = ("fail", "cancel", "ack_cancel", "phantom", "pause")
ALL_WEIGHTS = {**WORKER_WEIGHTS, "phantom": 4}


def available(sim: Simulator, weights: dict[str, int]) -> list[str]:
    """The actions that make sense now, repeated by weight (so no draw is wasted)."""
    possible = {
        "succeed": bool(sim.outstanding),
        "fail": bool(sim.outstanding),
        "ack_cancel": any(k[3] is Phase.RUN for k in sim.outstanding),
        "fire": bool(sim.timers),
        "stale_timer": bool(set(sim.ever_armed) - set(sim.timers)),
        "signal": bool(sim.waiting_signals()),
        "operator": bool(sim.state.held),
        "dup_signal": bool(sim.state.signals_seen),
        "redeliver": bool(sim.history),
    }
    return [a for a, w in weights.items() if possible.get(a, True) for _ in range(w)]


def random_step(sim: Simulator, data: st.DataObject, weights: dict[str, int]) -> None:
    action = data.draw(sampled(available(sim, weights)), label="action")
    if action in ("succeed", "fail"):
        key = data.draw(sampled(list(sim.outstanding)), label="execution")
        if action == "succeed":
            messages, sessions = data.draw(contexts, label="agent context")
            output = data.draw(outputs, label="output")
            sim.succeed(key, output, messages=messages, sessions=sessions)
        else:
            sim.fail(key, data.draw(error_classes, label="error class"))
    elif action == "operator":
        held, _phase = data.draw(sampled(sim.state.held), label="held execution")
        decision = data.draw(sampled(list(RECOVERY_SIGNALS)), label="operator's decision")
        result = sim.signal(decision, f"op-{sim.decisions}", wait=held.node, actor="operator")
        assert isinstance(result, Decision) and not result.ignored, result
    elif action == "ack_cancel":
        runs = [k for k in sim.outstanding if k[3] is Phase.RUN]
        node, iteration, attempt, phase = data.draw(sampled(runs), label="execution")
        sim.deliver(NodeCancelled(sim.tick(), node, iteration, attempt, phase=phase))
    elif action == "fire":
        sim.fire(data.draw(sampled(sorted(sim.timers)), label="timer"))
    elif action == "stale_timer":
        stale = sorted(set(sim.ever_armed) - set(sim.timers))
        result = sim.fire(data.draw(sampled(stale), label="stale timer"))
        assert isinstance(result, Decision), f"firing a timer that is not armed: {result!r}"
        assert result.ignored, f"firing a timer that is not armed was not ignored: {result}"
    elif action == "signal":
        waiting = sim.state.waiting_on
        assert waiting is not None
        name = data.draw(sampled(sim.waiting_signals()), label="signal")
        signal_id = data.draw(sampled(["", "sig-a", "sig-b", f"sig-{sim.decisions}"]))
        wait, iteration = data.draw(
            sampled(
                [
                    (None, None),
                    (waiting.node, None),
                    (waiting.node, waiting.iteration),
                    (waiting.node, waiting.iteration - 1),
                    ("s0", 1),
                ]
            ),
            label="addressed to",
        )
        sim.signal(name, signal_id, wait=wait, iteration=iteration, actor="someone")
    elif action == "bad_signal":
        declared = sorted(
            {
                name
                for node in sim.definition.nodes.values()
                if isinstance(node, WaitNode)
                for name in node.signals
            }
        )
        name = data.draw(sampled(["bogus", *declared]), label="bad signal")
        # A wait is open while a branch left to finish still runs (a quorum join's rest,
        # a wait in one of two parallel branches): the run is running, and the wait
        # answers a signal by its own rules, as it does once the run is waiting.
        waiting = bool(sim.state.waits) and sim.state.status in (
            RunStatus.RUNNING,
            RunStatus.WAITING,
        )
        result = sim.signal(name, f"bad-{sim.decisions}")
        if name == "bogus" and waiting:
            assert isinstance(result, UnknownSignal), f"undeclared signal gave {result!r}"
        if not waiting:
            assert isinstance(result, NotWaiting), f"signal to a non-waiting run: {result!r}"
    elif action == "dup_signal":
        seen = sim.state.signals_seen
        signal_id = data.draw(sampled(seen), label="duplicate signal id")
        names = sim.waiting_signals() or ["approve"]
        result = sim.signal(data.draw(sampled(names)), signal_id)
        assert isinstance(result, Decision), f"duplicate signal id {signal_id!r}: {result!r}"
        assert result.ignored, f"duplicate signal id {signal_id!r} was not ignored: {result}"
    elif action == "cancel":
        was = sim.state.status
        result = sim.deliver(CancelRequested(sim.tick(), reason="stop", actor="someone"))
        if was.terminal:
            assert isinstance(result, IllegalTransition), f"cancel of a {was} run: {result!r}"
    elif action == "redeliver":
        old = sim.history[data.draw(ints(0, len(sim.history) - 1), label="redelivered #")]
        sim.deliver(replace(old, at=sim.tick()))
    elif action == "pause":
        sim.tick(data.draw(sampled([30.0, 600.0, 7200.0]), label="pause"))
    else:
        assert action == "phantom"
        # Half the time the current execution of a node that no worker was given (a
        # wait, a parallel node, a pure decision node), else any node and key at all.
        current = sorted(
            (k, s.iteration, s.attempt, Phase.RUN)
            for k, s in sim.state.nodes.items()
            if (k, s.iteration, s.attempt, Phase.RUN) not in sim.dispatched
        )
        if current and data.draw(st.booleans(), label="current execution"):
            node, iteration, attempt, phase = data.draw(sampled(current), label="key")
        else:
            nodes = [*sorted(sim.definition.nodes), "ghost"]
            node = data.draw(sampled(nodes), label="node")
            iteration = data.draw(ints(1, 3), label="iteration")
            attempt = data.draw(ints(1, 2), label="attempt")
            phase = data.draw(sampled(list(Phase)), label="phase")
            if (node, iteration, attempt, phase) in sim.dispatched:
                return  # not a phantom: that execution exists
        kind = data.draw(sampled(["succeeded", "failed", "cancelled"]), label="result")
        if kind == "succeeded":
            phantom: Event = NodeSucceeded(
                sim.tick(), node, iteration, attempt, data.draw(outputs), phase
            )
        elif kind == "failed":
            error = data.draw(sampled(list(ErrorClass)), label="error class")
            phantom = NodeFailed(sim.tick(), node, iteration, attempt, error, "x", phase)
        else:
            phantom = NodeCancelled(sim.tick(), node, iteration, attempt, phase)
        result = sim.deliver(phantom)
        if node == "ghost":
            assert isinstance(result, UnknownNode), f"event for an unknown node: {result!r}"


def features(definition: WorkflowDefinition) -> list[str]:
    """What a generated definition exercises, for ``--hypothesis-show-statistics``."""
    nodes = definition.nodes.values()
    found = [f"node kind: {kind}" for kind in sorted({node.kind for node in nodes})]
    parallels = [node for node in nodes if isinstance(node, ParallelNode)]
    found += [f"join: {kind}" for kind in sorted({p.join.policy.value for p in parallels})]
    flags = {
        "pure decision node": any(
            isinstance(node, TaskNode) and node.handler is None for node in nodes
        ),
        "bounded loop": any(definition.visit_limit(node.id) for node in nodes),
        "detour node": any(node.id.startswith("d") for node in nodes),
        "retry": any(node.retry.attempts > 1 for node in nodes),
        "compensation": any(node.compensate for node in nodes),
        "compensate_on_cancel": definition.compensate_on_cancel,
        "join timeout": any(p.join.timeout for p in parallels),
        "join rest: finish": any(p.join.rest.value == "finish" for p in parallels),
        "branch default": any(node.default for node in nodes),
    }
    return found + [name for name, present in flags.items() if present]


def run_scenario(data: st.DataObject, weights: dict[str, int]) -> None:
    spec = data.draw(definition_specs(), label="definition")
    # A generated spec that does not load is a bug of the generator, not a skip.
    definition = load_definition(spec)
    sim = Simulator(definition)
    size = len(definition.nodes)
    event(f"nodes: {'<5' if size < 5 else '5-9' if size < 10 else '10+'}")
    # Swarm testing: each example turns the disruptive actions down, off or up, so that
    # some runs get far (no failures, no cancel) and others are cancelled mid-flight.
    weights = {
        action: weight * data.draw(sampled([1, 0, 4]), label=f"{action} weight")
        if action in SWARM
        else weight
        for action, weight in weights.items()
    }
    try:
        if data.draw(ints(0, 9), label="start first") > 0:
            sim.start(data.draw(outputs, label="input"))
        steps = data.draw(ints(0, 30), label="random steps")
        for _ in range(steps):
            if sim.state.status.terminal:
                break
            random_step(sim, data, weights)
        if sim.state.status is RunStatus.PENDING:
            sim.start()
        event(f"after random phase: {sim.state.status}")
        drained = sim.drain()
        event(f"drain decisions: {'0' if not drained else '<10' if drained < 10 else '10+'}")
        event(f"final: {sim.state.status}")
        final = _json(sim.state)
        # A terminal run stays as it is, whatever else arrives.
        for _ in range(data.draw(ints(0, 5), label="after the end")):
            random_step(sim, data, weights)
        assert _json(sim.state) == final, "a terminal run changed"
        for seen in sorted(sim.coverage()):
            event(seen)
    finally:
        note(sim.describe_trace())


PROPERTY_SETTINGS = settings(
    # More for a soak run: DECIDER_PROPERTY_EXAMPLES=20000 (not CAIRN_*: cairn's settings
    # refuse unknown CAIRN_* variables).
    max_examples=int(os.environ.get("DECIDER_PROPERTY_EXAMPLES", "800")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # One (shrunk) failure per property keeps a failing run well inside the timeout.
    report_multiple_bugs=False,
)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_worker_events_keep_every_run_legal_and_terminating(data: st.DataObject) -> None:
    """The issue's property, with the events the outside world really sends: results of
    dispatched executions (also duplicated, stale or acknowledging a cancel), timers as
    armed and long disarmed, declared/undeclared/duplicate signals, cancel requests."""
    run_scenario(data, WORKER_WEIGHTS)


@PROPERTY_SETTINGS
@given(data=st.data())
def test_events_for_undispatched_executions_are_refused_or_ignored(data: st.DataObject) -> None:
    """The same, plus results for executions that were never dispatched (any node, also
    wait, parallel and end nodes, any iteration, attempt and phase): each must be refused
    with a typed error or ignored, and no invariant may break."""
    run_scenario(data, ALL_WEIGHTS)


@settings(max_examples=300, deadline=None)
@given(definition_specs())
def test_generated_definitions_are_valid(spec: dict[str, Any]) -> None:
    """Every generated spec loads: one that fails validation is a generator bug, and the
    properties above load theirs without ``assume`` (so such a bug fails them too)."""
    definition = load_definition(spec)
    for feature in features(definition):
        event(feature)


# ---------------------------------------------------------------------------------------
# Examples: the simulator on examples/book_flight.yaml
# ---------------------------------------------------------------------------------------


@pytest.fixture
def flight() -> Simulator:
    sim = Simulator(load_file(BOOK_FLIGHT))
    decision = sim.start({"origin": "BER", "destination": "LIS"})
    assert isinstance(decision, Decision)
    assert sim.state.status is RunStatus.RUNNING
    return sim


def test_book_flight_happy_path(flight: Simulator) -> None:
    sim = flight
    sim.succeed(sim.find("search"), {"offers": [{"flight": "CX1", "fare_eur": 189}]})
    sim.succeed(sim.find("price_check"), {"total_eur": 189})
    sim.succeed(sim.find("reserve"), {"booking": "PNR-1"})
    assert sorted(k[0] for k in sim.outstanding) == ["email", "sms"]
    decision = sim.succeed(sim.find("sms"))
    assert isinstance(decision, Decision)
    # Quorum 1 of 2: the join completes, email (rest: cancel) is cancelled.
    assert CancelNode("email", 1, 1, "the join is complete") in decision.commands
    assert "join_timeout:notify:1:0" not in sim.timers
    sim.succeed(sim.find("triage"), {"intent": "change"})
    assert sim.state.status is RunStatus.SUCCEEDED
    assert sim.state.vars["booking"] == "PNR-1"
    assert sim.state.compensable  # reserve succeeded; nothing needed undoing
    # The cancelled email's late result is a duplicate: ignored.
    late = sim.succeed(("email", 1, 1, Phase.RUN))
    assert isinstance(late, Decision)
    assert late.ignored


def test_book_flight_expensive_approval_times_out_until_visits_run_out(flight: Simulator) -> None:
    sim = flight
    sim.succeed(sim.find("search"))
    sim.succeed(sim.find("price_check"), {"total_eur": 1240})
    assert sim.state.status is RunStatus.WAITING
    assert isinstance(sim.signal("maybe", "x1"), UnknownSignal)
    for visit in (1, 2, 3):
        assert sim.state.waiting_on is not None
        assert sim.state.waiting_on.iteration == visit
        sim.fire(f"wait:approval:{visit}:0")
        if visit < 3:
            sim.succeed(sim.find("escalate"))
    # escalate may run twice; the third timeout enters it a third time and fails the run.
    assert sim.state.status is RunStatus.FAILED
    assert "max_visits" in (sim.state.reason or "")
    assert isinstance(sim.signal("approve", "x2"), NotWaiting)


def test_book_flight_failure_after_reserve_compensates(flight: Simulator) -> None:
    sim = flight
    sim.succeed(sim.find("search"))
    sim.succeed(sim.find("price_check"), {"total_eur": 100})
    reserve = sim.find("reserve")
    sim.fail(reserve, ErrorClass.TRANSIENT)  # retried (attempts: 5)
    assert sim.state.nodes["reserve"].status is NodeStatus.RETRYING
    sim.fire(next(t for t in sim.timers if t.startswith("retry:reserve")))
    sim.succeed(sim.find("reserve"))
    sim.succeed(sim.find("email"))
    sim.fail(sim.find("triage"), ErrorClass.PERMANENT)
    assert sim.state.status is RunStatus.COMPENSATING
    sim.succeed(sim.find("reserve", Phase.COMPENSATE), {"released": "PNR-1"})
    assert sim.state.status is RunStatus.COMPENSATED
    assert sim.drain() == 0


def test_book_flight_cancel_then_drain(flight: Simulator) -> None:
    sim = flight
    decision = sim.deliver(CancelRequested(sim.tick(), reason="customer changed their mind"))
    assert isinstance(decision, Decision)
    assert sim.state.status is RunStatus.CANCELLING
    assert CancelNode("search", 1, 1, "customer changed their mind") in decision.commands
    sim.drain()
    assert sim.state.status is RunStatus.CANCELLED
    assert isinstance(sim.deliver(CancelRequested(sim.tick(), reason="again")), IllegalTransition)


def test_book_flight_cancel_during_the_join_settles_when_the_branches_stop(
    flight: Simulator,
) -> None:
    sim = flight
    sim.succeed(sim.find("search"))
    sim.succeed(sim.find("price_check"), {"total_eur": 100})
    sim.succeed(sim.find("reserve"))
    decision = sim.deliver(CancelRequested(sim.tick(), reason="stop"))
    assert isinstance(decision, Decision)
    # Only what workers were given is asked to stop: not the parallel node itself.
    stops = sorted(c.node for c in decision.commands if isinstance(c, CancelNode))
    assert stops == ["email", "sms"]
    sim.deliver(NodeCancelled(sim.tick(), "email", 1, 1))
    assert sim.state.status is RunStatus.CANCELLING
    sim.deliver(NodeCancelled(sim.tick(), "sms", 1, 1))
    # Settled by the acknowledgements, without waiting for the cancel timeout.
    assert sim.state.status is RunStatus.CANCELLED
