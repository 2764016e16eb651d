"""Runtime anomaly detection: the pure detectors, the ``anomaly:`` block of a definition,
and the decider driven through crafted workflows — each kind caught, the intervention
made once, then the run failed (compensations included) or handed to a person, the scene
kept; a long loop that makes progress never caught; replays deciding alike."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cairn import Workflow, WorkflowDefinitionError, load_definition
from cairn.cli.render import as_mermaid
from cairn.decider.anomaly import (
    ABSENT,
    cleared,
    fingerprint,
    in_window,
    note_tools,
    observe,
    repeating_block,
    returns,
    tool_calls,
    value_key,
)
from cairn.decider.graph import Decision, decide
from cairn.definitions.text import parse_text
from cairn.definitions.transitions import transition_table
from cairn.model.commands import Dispatch, FinishRun, ReportAnomaly
from cairn.model.definition import (
    AnomalyKind,
    AnomalyPolicy,
    ErrorClass,
    NoProgressRule,
    OscillationRule,
    PingPongRule,
    WorkflowDefinition,
)
from cairn.model.events import (
    Event,
    NodeCancelled,
    NodeFailed,
    Phase,
    RollbackRequested,
)
from cairn.model.state import AnomalyTrack, RunState
from cairn.model.statuses import RunStatus
from cairn.observe.explain import anomaly_lines
from cairn.testing.driver import Driver
from tests.unit import handlers

NOOP = handlers.noop
HINT = "You are going round in circles ({kind}). Try something else."

# -- the detectors ------------------------------------------------------------------------


def test_the_fingerprint_ignores_order_and_sees_absence_and_artifact_content() -> None:
    base = fingerprint({"a": 1, "b": {"x": [1, 2], "y": None}}, {})
    assert base == fingerprint({"b": {"y": None, "x": [1, 2]}, "a": 1}, {})
    assert base != fingerprint({"a": 1, "b": {"x": [2, 1], "y": None}}, {})
    assert fingerprint({"a": None}, {}) != fingerprint({}, {})  # absent is not null
    assert len(base) == 16 and int(base, 16) >= 0
    # Only the chosen fields count, less the ignored ones.
    assert fingerprint({"a": 1, "noise": 1}, {}, ["a"]) == fingerprint(
        {"a": 1, "noise": 2}, {}, ["a"]
    )
    assert fingerprint({"a": 1, "tick": 1}, {}, ignore=["tick"]) == fingerprint(
        {"a": 1, "tick": 2}, {}, ignore=["tick"]
    )
    # Artifacts count by content: a new version of the same draft is no progress.
    draft = {"name": "draft", "version": 1, "sha256": "aa", "uri": "fs://1"}
    same_again = {**draft, "version": 2, "uri": "fs://2"}
    rewritten = {**draft, "version": 3, "sha256": "bb"}
    assert fingerprint({}, {"draft": draft}) == fingerprint({}, {"draft": same_again})
    assert fingerprint({}, {"draft": draft}) != fingerprint({}, {"draft": rewritten})
    assert fingerprint({}, {"draft": {"version": 1}}) != fingerprint({}, {"draft": {"version": 2}})


def test_values_are_kept_as_themselves_when_short_and_as_digests_when_long() -> None:
    assert value_key(100) == "100"
    assert value_key({"b": 1, "a": "x"}) == '{"a":"x","b":1}'
    long = value_key("x" * 200)
    assert long.startswith("sha256:") and len(long) == len("sha256:") + 16
    assert long != value_key("x" * 201)
    assert value_key("sha256:0123456789abcdef") != "sha256:0123456789abcdef"  # quoted


def test_tool_calls_are_read_from_openai_and_anthropic_messages() -> None:
    messages: list[Mapping[str, Any]] = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris", "units": "C"}'},
                },
                {"function": {"name": "clock", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "12 C"},  # a result, not a call
        {"role": "assistant", "function_call": {"name": "legacy", "arguments": "{}"}},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "let me look"},
                {"type": "tool_use", "id": "t", "name": "search", "input": {"q": "cairn"}},
            ],
        },
        {"role": "assistant", "tool_calls": "garbage"},
        "not a message",  # type: ignore[list-item]
        {"role": "assistant", "tool_calls": [{"function": {"name": ""}}, 7]},
    ]
    assert tool_calls(messages) == [
        'weather {"city":"Paris","units":"C"}',  # the JSON text, canonical
        'clock "not json"',
        "legacy {}",
        'search {"q":"cairn"}',
    ]
    # The same call written differently is the same call.
    assert tool_calls(
        [
            {
                "tool_calls": [
                    {"function": {"name": "weather", "arguments": '{"units":"C","city":"Paris"}'}}
                ]
            }
        ]
    ) == ['weather {"city":"Paris","units":"C"}']


@pytest.mark.parametrize(
    ("calls", "max_period", "repeats", "block"),
    [
        ("ABABAB", 3, 3, ("A", "B")),
        ("ABABA", 3, 3, None),  # two and a half
        ("XABABAB", 2, 3, ("A", "B")),  # only the tail counts
        ("ABCABCABC", 3, 3, ("A", "B", "C")),
        ("ABCABCABC", 2, 3, None),  # period 3 is beyond max_period 2
        ("ABAABAABA", 3, 3, ("A", "B", "A")),
        ("AAAAAAAA", 4, 2, None),  # one call over and over is not a ping-pong
        ("ABABABAB", 4, 2, ("A", "B")),  # the shortest block is reported
        ("ABCDABCD", 4, 2, ("A", "B", "C", "D")),
        ("", 3, 2, None),
        ("AB", 2, 2, None),
    ],
)
def test_repeating_block(
    calls: str, max_period: int, repeats: int, block: tuple[str, ...] | None
) -> None:
    assert repeating_block(list(calls), max_period, repeats) == block


def test_the_window_keeps_the_value_held_when_it_began_and_returns_count_revisits() -> None:
    changes = ((1, "a"), (5, "b"), (9, "a"), (10, "c"), (11, "b"))
    assert in_window(changes, 11, 4) == ((5, "b"), (9, "a"), (10, "c"), (11, "b"))
    assert in_window(changes, 11, 100) == changes
    assert in_window(((1, "a"),), 50, 4) == ((1, "a"),)  # the current value always stays
    assert returns(changes) == 2  # back to a at 9, back to b at 11
    assert returns(((1, "1"), (2, "2"), (3, "1"), (4, "2"))) == 2
    assert returns(((1, "100"), (2, "90"), (3, "95"), (4, "92"))) == 0  # converging
    assert returns(()) == 0


def _policy(**changes: Any) -> AnomalyPolicy:
    return AnomalyPolicy(**changes)


def _observe_all(
    policy: AnomalyPolicy, moves: Sequence[tuple[str, dict[str, Any]]]
) -> list[tuple[int, str]]:
    """Feed (node, state) moves; the (step, kind) of each detection."""
    track: AnomalyTrack | None = None
    found = []
    for node, variables in moves:
        track, anomaly = observe(policy, track, variables, {}, node)
        if anomaly is not None:
            found.append((track.steps, anomaly.kind.value))
            track = cleared(track)
    return found


def test_no_progress_needs_the_same_state_round_a_loop() -> None:
    policy = _policy(no_progress=NoProgressRule(steps=4))
    loop = [("think", {"q": 1}), ("act", {"q": 1})] * 4
    assert _observe_all(policy, loop) == [(5, "no_progress")]
    chain = [(f"n{i}", {"q": 1}) for i in range(20)]  # writes nothing, but goes somewhere
    assert _observe_all(policy, chain) == []
    progress = [("think" if i % 2 else "act", {"q": i}) for i in range(50)]
    assert _observe_all(policy, progress) == []
    # Ignored fields are not progress.
    ticking = [("think" if i % 2 else "act", {"q": 1, "tick": i}) for i in range(6)]
    assert _observe_all(policy, ticking) == []
    assert _observe_all(_policy(no_progress=NoProgressRule(4), ignore=("tick",)), ticking) == [
        (5, "no_progress")
    ]


def test_ping_pong_of_nodes_counts_only_calls_that_come_back_to_the_same_state() -> None:
    policy = _policy(ping_pong=PingPongRule(max_period=3, repeats=3))
    toggling = [("a", {"x": 1}), ("b", {"x": 2})] * 3
    assert _observe_all(policy, toggling) == [(6, "ping_pong")]
    agent_loop = [(node, {"i": i}) for i in range(30) for node in ("think", "act", "observe")]
    assert _observe_all(policy, agent_loop) == []


def test_ping_pong_of_tools() -> None:
    policy = _policy(ping_pong=PingPongRule(max_period=2, repeats=3))

    def call(name: str, **arguments: Any) -> dict[str, Any]:
        return {
            "role": "assistant",
            "tool_calls": [{"function": {"name": name, "arguments": json.dumps(arguments)}}],
        }

    track: AnomalyTrack | None = None
    seen = []
    for step in range(6):
        message = call("search", q="x") if step % 2 == 0 else call("read", url="u")
        track = note_tools(policy, track, [message])
        track, anomaly = observe(policy, track, {"step": step}, {}, "agent")
        seen.append(anomaly)
    assert seen[:5] == [None] * 5
    assert seen[5] is not None and seen[5].kind is AnomalyKind.PING_PONG
    assert seen[5].scene["block"] == ['search {"q":"x"}', 'read {"url":"u"}']
    assert track is not None and len(track.tools) == 6  # what max_period * repeats needs
    # Different arguments each time are progress.
    track = None
    for step in range(12):
        track = note_tools(policy, track, [call("search", q=f"query {step}")])
        track, anomaly = observe(policy, track, {"step": step}, {}, "agent")
        assert anomaly is None
    # Without ping_pong, tools are not even kept.
    assert note_tools(_policy(no_progress=NoProgressRule()), None, [call("x")]) is None


def test_oscillation_of_a_watched_field() -> None:
    policy = _policy(oscillation=OscillationRule(fields=("amount",), window=12, returns=3))
    haggling = [("offer", {"amount": a, "round": i}) for i, a in enumerate([100, 120] * 4)]
    found = _observe_all(policy, haggling)
    assert found == [(5, "oscillation")]  # 100 120 100 120 100: the third return
    converging = [
        ("offer", {"amount": a, "round": i}) for i, a in enumerate([100, 90, 95, 92, 94, 93])
    ]
    assert _observe_all(policy, converging) == []
    # Slowly is not oscillating: one change every 10 moves never has 3 returns in 12.
    slow = [("offer", {"amount": 100 if (i // 10) % 2 else 120, "i": i}) for i in range(80)]
    assert _observe_all(policy, slow) == []
    # Absent and present again is a change too.
    flicker = [("n", {"flag": True} if i % 2 else {}) for i in range(6)]
    assert _observe_all(_policy(oscillation=OscillationRule(("flag",), 12, 2)), flicker) == [
        (4, "oscillation")
    ]
    track, _ = observe(policy, None, {}, {}, "n")
    assert track.values == {"amount": ((1, ABSENT),)}


# -- the decider, on crafted workflows ----------------------------------------------------


class Recorder(Driver):
    """The test driver, keeping every event it fed the decider (to replay them)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.events: list[Event] = []

    def apply(self, event: Event) -> Decision:
        self.events.append(event)
        return super().apply(event)

    def loop(self, output: Any = None, *, limit: int = 400, to_the_end: bool = True) -> int:
        """Answer every dispatch with ``output(node, n)`` (a mapping, or (output,
        messages)) until nothing is dispatched (or ``limit`` results, if not
        ``to_the_end``); how many results that took."""
        for n in range(limit):
            if not self.dispatched:
                return n
            node = self.dispatched[0].node
            answer = output(node, n) if output is not None else {}
            if isinstance(answer, tuple):
                self.succeed(node, answer[0], answer[1])
            else:
                self.succeed(node, answer)
        if to_the_end:
            raise AssertionError(f"still running after {limit} results: {self.state.status}")
        return limit

    def commands(self, kind: type[Any]) -> list[Any]:
        return [c for d in self.decisions for c in d.commands if isinstance(c, kind)]


def agent(
    anomaly: Mapping[str, Any] | None,
    *,
    compensate: bool = False,
    handoff: bool = False,
    max_visits: int = 1000,
) -> WorkflowDefinition:
    """think -> act -> (flag? done : think), optionally after a compensable booking, and
    with a review wait a stuck run can be handed to."""
    options: dict[str, Any] = {"max_visits": max_visits}
    if anomaly is not None:
        options["anomaly"] = dict(anomaly)
    wf = Workflow("agent", version=1, **options)
    if compensate:
        wf.task("book", NOOP, next="think", compensate=handlers.undo)
    wf.task("think", NOOP, next="act")
    wf.task(
        "act", NOOP, branch={"guard": handlers.by_flag, "cases": {True: "done", False: "think"}}
    )
    if handoff:
        wf.wait(
            "review",
            signals={"resume": "think", "stop": "gave_up"},
            timeout="1h",
            on_timeout="gave_up",
        )
        wf.end("gave_up", "failed")
    return wf.end("done").build()


STUCK = {"no_progress": {"steps": 4}, "on_detect": {"hint": HINT}}


def _hints(state: RunState) -> list[dict[str, Any]]:
    return [m for m in state.messages if m.get("cairn") == "anomaly"]


def test_a_loop_without_progress_gets_one_hint_then_fails_with_the_scene() -> None:
    driver = Recorder(agent(STUCK))
    driver.start(question="2 + 2")
    driver.loop()
    state = driver.state
    assert state.status is RunStatus.FAILED
    assert state.reason is not None and state.reason.startswith("anomaly:no_progress: ")
    assert [h["content"] for h in _hints(state)] == [
        "You are going round in circles (no_progress). Try something else."
    ]
    assert _hints(state)[0]["role"] == "system" and _hints(state)[0]["kind"] == "no_progress"
    assert [(r["kind"], r["action"]) for r in state.anomalies] == [
        ("no_progress", "intervened"),
        ("no_progress", "failed"),
    ]
    scene = state.anomalies[-1]["scene"]
    assert scene["streak"] == 4 and len(scene["fingerprint"]) == 16
    assert {node for node, _fp in scene["moves"]} == {"think", "act"}
    assert {fp for _node, fp in scene["moves"][-5:]} == {scene["fingerprint"]}
    reports = driver.commands(ReportAnomaly)
    assert [(r.kind, r.action) for r in reports] == [
        ("no_progress", "intervened"),
        ("no_progress", "failed"),
    ]
    assert driver.commands(FinishRun) == [FinishRun(RunStatus.FAILED, state.reason)]
    moves = [m for m in driver.path if m[1].startswith("anomaly_")]
    intervened_at = reports[0].node
    assert moves == [
        (intervened_at, "anomaly_intervened:no_progress", intervened_at),
        (reports[1].node, "anomaly_detected:no_progress", "(failed)"),
    ]
    # The intervention is made on the way into a node, which is then dispatched with the
    # hint already in the messages its handler will see.
    decision = next(
        d for d in driver.decisions if any(isinstance(c, ReportAnomaly) for c in d.commands)
    )
    assert Dispatch(intervened_at, decision.state.visits[intervened_at], 1) in decision.commands
    assert _hints(decision.state)


def test_intervening_resets_the_state_it_names() -> None:
    reset_drop = agent({"no_progress": {"steps": 3}, "on_detect": {"reset": ["scratch"]}})
    driver = Recorder(reset_drop)
    driver.start(scratch="stale plan", keep=1)
    driver.loop(limit=6, to_the_end=False)  # up to the intervention and a little beyond
    assert driver.state.anomalies[0]["action"] == "intervened"
    assert "scratch" not in driver.state.vars and driver.state.vars["keep"] == 1
    assert not _hints(driver.state)  # no hint declared: none given
    reset_assign = agent(
        {"no_progress": {"steps": 3}, "on_detect": {"reset": {"plan": None, "attempts": 0}}}
    )
    driver = Recorder(reset_assign)
    driver.start(plan="stale", attempts=5)
    driver.loop(limit=6, to_the_end=False)
    assert driver.state.vars["plan"] is None and driver.state.vars["attempts"] == 0


@pytest.mark.parametrize("interventions", [0, 1, 2])
def test_the_number_of_interventions_before_the_run_is_stopped(interventions: int) -> None:
    policy = {
        "no_progress": {"steps": 3},
        "on_detect": {"hint": "h", "interventions": interventions},
    }
    driver = Recorder(agent(policy))
    driver.start()
    driver.loop()
    assert driver.state.status is RunStatus.FAILED
    actions = [r["action"] for r in driver.state.anomalies]
    assert actions == ["intervened"] * interventions + ["failed"]
    assert len(_hints(driver.state)) == interventions
    assert driver.state.anomaly is not None
    assert driver.state.anomaly.interventions == (
        {"no_progress": interventions} if interventions else {}
    )


def test_tools_ping_ponging_are_caught_though_the_state_changes() -> None:
    policy = {"ping_pong": {"max_period": 2, "repeats": 3}, "on_detect": {"hint": HINT}}

    def answer(node: str, n: int) -> Any:
        tool = ("search", {"q": "flights"}) if n % 2 == 0 else ("read", {"url": "u1"})
        call = {
            "role": "assistant",
            "tool_calls": [{"function": {"name": tool[0], "arguments": json.dumps(tool[1])}}],
        }
        return {"n": n}, [call]

    driver = Recorder(agent(policy))
    driver.start()
    driver.loop(answer)
    state = driver.state
    assert state.status is RunStatus.FAILED
    assert state.reason is not None and state.reason.startswith("anomaly:ping_pong: the tool calls")
    assert [r["action"] for r in state.anomalies] == ["intervened", "failed"]
    assert state.anomalies[-1]["scene"]["block"] == ['search {"q":"flights"}', 'read {"url":"u1"}']
    assert len(_hints(state)) == 1


def test_nodes_ping_ponging_between_two_states_are_caught() -> None:
    wf = Workflow(
        "toggle", version=1, max_visits=100, anomaly={"ping_pong": True, "no_progress": True}
    )
    wf.task("a", NOOP, next="b")
    wf.task("b", NOOP, branch={"guard": handlers.by_flag, "cases": {True: "done", False: "a"}})
    driver = Recorder(wf.end("done").build())
    driver.start()
    driver.loop(lambda node, n: {"x": 1 if node == "a" else 2})
    assert driver.state.status is RunStatus.FAILED
    assert driver.state.reason is not None
    assert driver.state.reason.startswith("anomaly:ping_pong: the nodes ")
    block = driver.state.anomalies[-1]["scene"]["block"]
    assert len(block) == 2 and {call.split("@")[0] for call in block} == {"a", "b"}


def test_a_value_going_up_and_down_is_an_oscillation() -> None:
    policy = {
        "oscillation": {"fields": ["amount"], "window": 10, "returns": 3},
        "no_progress": {"steps": 4},
        "ping_pong": True,
    }
    driver = Recorder(agent(policy))
    driver.start()
    # Every result is new (round), so neither no_progress nor ping_pong sees anything.
    driver.loop(lambda node, n: {"amount": 100 if n % 2 else 120, "round": n})
    state = driver.state
    assert state.status is RunStatus.FAILED
    assert state.reason is not None and state.reason.startswith("anomaly:oscillation: amount ")
    assert [r["kind"] for r in state.anomalies] == ["oscillation", "oscillation"]
    transitions = state.anomalies[-1]["scene"]["transitions"]["amount"]
    assert [value for _step, value in transitions][-4:] in (
        ["100", "120", "100", "120"],
        ["120", "100", "120", "100"],
    )


def test_a_stopped_run_is_compensated_like_any_failed_run() -> None:
    driver = Recorder(agent(STUCK, compensate=True))
    driver.start()
    driver.succeed("book", {"booking": "PNR-1"})
    for _ in range(100):
        if driver.state.status is not RunStatus.RUNNING:
            break
        driver.succeed(driver.dispatched[0].node, {})
    assert driver.state.status is RunStatus.COMPENSATING
    assert [(c.node, c.phase) for c in driver.dispatched] == [("book", Phase.COMPENSATE)]
    assert driver.state.compensation is not None
    assert driver.state.compensation.reason is not None
    assert driver.state.compensation.reason.startswith("anomaly:no_progress")
    driver.succeed("book", {"released": True})
    assert driver.state.status is RunStatus.COMPENSATED
    assert driver.state.reason is not None and driver.state.reason.startswith("anomaly:no_progress")


def test_a_stuck_run_can_be_handed_to_a_person_instead() -> None:
    policy = {**STUCK, "on_detect": {"hint": HINT, "then": "wait:review"}}
    driver = Recorder(agent(policy, handoff=True))
    driver.start()
    driver.loop()
    state = driver.state
    assert state.status is RunStatus.WAITING
    assert state.waiting_on is not None and state.waiting_on.node == "review"
    assert [r["action"] for r in state.anomalies] == ["intervened", "handed_off"]
    handed = [m for m in driver.path if m[1] == "anomaly_detected:no_progress"]
    assert len(handed) == 1 and handed[0][2] == "review"
    assert [r.action for r in driver.commands(ReportAnomaly)] == ["intervened", "handed_off"]
    # The person resumes it; stuck again, it comes back to them (no second hint).
    driver.signal("resume")
    assert driver.outstanding == ["think"]
    driver.loop()
    assert driver.state.status is RunStatus.WAITING
    assert [r["action"] for r in driver.state.anomalies] == [
        "intervened",
        "handed_off",
        "handed_off",
    ]
    assert len(_hints(driver.state)) == 1
    driver.signal("stop")
    assert driver.state.status is RunStatus.FAILED


def test_a_long_loop_that_makes_progress_is_never_caught() -> None:
    policy = {
        "no_progress": {"steps": 2},
        "ping_pong": {"max_period": 8, "repeats": 2},
        "oscillation": {"fields": ["draft", "done_count"], "window": 50, "returns": 1},
        "on_detect": {"interventions": 0},
    }
    driver = Recorder(agent(policy))
    driver.start()

    def answer(node: str, n: int) -> Any:
        if n == 399:  # the 200th act: done
            return {"flag": True}
        call = {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "search", "arguments": json.dumps({"page": n})}}],
        }
        return {"draft": f"draft {n}", "done_count": n}, [call]

    results = driver.loop(answer, limit=500)
    assert results == 400  # 200 iterations of think -> act
    assert driver.state.status is RunStatus.SUCCEEDED
    assert driver.state.anomalies == []
    assert not driver.commands(ReportAnomaly)
    assert driver.state.anomaly is not None and driver.state.anomaly.steps == 400


def test_retries_and_long_steps_are_not_moves() -> None:
    wf = Workflow("slow", version=1, anomaly={"no_progress": {"steps": 1}})
    wf.task("think", NOOP, next="done", retry={"attempts": 10, "backoff": "1s", "jitter": "none"})
    driver = Recorder(wf.end("done").build())
    driver.start()
    for _ in range(8):  # a node that fails and is retried does not move the run
        command = driver.take("think")
        driver.apply(
            NodeFailed(
                driver.tick(3600),
                "think",
                command.iteration,
                command.attempt,
                ErrorClass.TRANSIENT,
                "slow",
            )
        )
        driver.fire("retry:think")
    driver.succeed("think", {})
    assert driver.state.status is RunStatus.SUCCEEDED
    assert driver.state.anomalies == []
    assert driver.state.anomaly is not None and driver.state.anomaly.steps == 1


def test_the_branches_of_a_fan_out_are_not_moves() -> None:
    wf = Workflow(
        "fan",
        version=1,
        max_visits=5,
        anomaly={"no_progress": {"steps": 1}, "on_detect": {"interventions": 0}},
    )
    wf.task("plan", NOOP, next="fan")
    wf.parallel("fan", [f"b{i}" for i in range(6)], next="check")
    for i in range(6):
        wf.task(f"b{i}", NOOP)
    wf.task(
        "check", NOOP, branch={"guard": handlers.by_flag, "cases": {True: "done", False: "plan"}}
    )
    driver = Recorder(wf.end("done").build())
    driver.start()
    driver.succeed("plan", {})
    assert sorted(driver.outstanding) == [f"b{i}" for i in range(6)]
    for i in range(6):
        driver.succeed(f"b{i}", {})
    assert driver.state.anomaly is not None
    assert [node for node, _fp in driver.state.anomaly.trail] == ["plan", "fan", "check"]
    assert driver.state.anomalies == []
    driver.succeed("check", {})  # back to plan, nothing changed: caught
    assert driver.state.status is RunStatus.FAILED


def test_replaying_the_history_decides_exactly_alike() -> None:
    policy = {
        "no_progress": {"steps": 3},
        "ping_pong": True,
        "oscillation": {"fields": ["amount"]},
        "on_detect": {"hint": HINT, "interventions": 2, "reset": ["scratch"]},
    }
    definition = agent(policy)
    driver = Recorder(definition)
    driver.start(scratch=1)
    driver.loop(lambda node, n: {"amount": (n // 6) % 2})
    assert driver.state.status is RunStatus.FAILED and len(driver.state.anomalies) == 3
    state = RunState(driver.run_id, definition.name, definition.version)
    for index, event in enumerate(driver.events):
        if index % 3 == 0:  # restored from a snapshot now and then, as a store would
            state = RunState.from_dict(json.loads(json.dumps(state.to_dict())))
        replayed = decide(definition, state, event)
        assert replayed == driver.decisions[index]
        state = replayed.state
    assert state.to_dict() == driver.state.to_dict()


def test_a_rollback_to_a_checkpoint_restores_what_the_detectors_had_seen() -> None:
    driver = Recorder(agent(STUCK))
    driver.start()
    # Up to just after the intervention (the hint is given on the way into a node).
    while not driver.state.anomalies:
        driver.succeed(driver.dispatched[0].node, {})
    intervened = len(driver.decisions) - 1
    checkpoint = driver.decisions[intervened - 2].state  # two results before it
    assert checkpoint.anomaly is not None and checkpoint.anomaly.interventions == {}
    driver.succeed(driver.dispatched[0].node, {})
    (running,) = driver.dispatched
    driver.apply(
        RollbackRequested(
            driver.tick(), reason="try again", to_seq=intervened - 1, rewind=checkpoint.to_dict()
        )
    )
    driver.take(running.node)
    driver.apply(NodeCancelled(driver.tick(), running.node, running.iteration, running.attempt))
    state = driver.state
    assert state.status is RunStatus.RUNNING
    assert state.anomaly is not None
    assert state.anomaly.interventions == {}  # as at the checkpoint: a hint may be given again
    assert state.anomaly.trail[:-1] == checkpoint.anomaly.trail  # plus the move it resumed with
    assert [r["action"] for r in state.anomalies] == ["intervened"]  # history stays


def test_without_an_anomaly_block_nothing_is_watched_or_written() -> None:
    driver = Recorder(agent(None, max_visits=30))
    driver.start()
    driver.loop(limit=100)
    assert driver.state.status is RunStatus.FAILED
    assert driver.state.reason == "max_visits: 'think' was entered more than 30 times"
    assert driver.state.anomaly is None and driver.state.anomalies == []
    assert "anomaly" not in driver.state.to_dict() and "anomalies" not in driver.state.to_dict()
    assert not driver.commands(ReportAnomaly)


def test_max_visits_is_still_checked_first() -> None:
    driver = Recorder(agent({"no_progress": {"steps": 50}}, max_visits=3))
    driver.start()
    driver.loop()
    assert driver.state.reason == "max_visits: 'think' was entered more than 3 times"


def test_a_snapshot_from_before_anomaly_detection_loads_and_round_trips() -> None:
    old = {
        "run_id": "r",
        "workflow": "agent",
        "version": 1,
        "status": "running",
        "vars": {"q": 1},
        "format": 2,
    }
    state = RunState.from_dict(old)
    assert state.anomaly is None and state.anomalies == [] and state.extra == {}
    driver = Recorder(agent(STUCK))
    driver.start()
    driver.loop()
    data = json.loads(json.dumps(driver.state.to_dict()))
    assert data["format"] == 3
    assert RunState.from_dict(data) == driver.state


# -- what people see ----------------------------------------------------------------------


def test_every_anomaly_move_is_a_row_of_the_transition_table() -> None:
    policy = {**STUCK, "ping_pong": True, "on_detect": {"then": "wait:review"}}
    definition = agent(policy, handoff=True)
    rows = {(r.source, r.event, r.target) for r in transition_table(definition)}
    for node in ("think", "act", "review"):
        for kind in ("no_progress", "ping_pong"):
            assert (node, f"anomaly_intervened:{kind}", node) in rows
            assert (node, f"anomaly_detected:{kind}", "review") in rows
    assert not any(r[0] in ("done", "gave_up") and "anomaly" in r[1] for r in rows)
    driver = Recorder(definition)
    driver.start()
    driver.loop()
    for move in driver.path:
        assert move in rows, move
    mermaid = as_mermaid(definition)
    assert "anomaly_intervened" not in mermaid
    assert "* --anomaly_detected--> review" in mermaid
    plain = {(r.source, r.event, r.target) for r in transition_table(agent(None))}
    assert not any("anomaly" in row[1] for row in plain)


def test_cairn_status_shows_the_anomalies_and_the_scene() -> None:
    policy = {**STUCK, "oscillation": {"fields": ["mood"], "returns": 5}}
    driver = Recorder(agent(policy))
    driver.start()
    driver.loop()
    lines = anomaly_lines(driver.state)
    assert lines[0].startswith("anomaly no_progress at ") and ": intervened: 4 moves" in lines[0]
    assert lines[1].startswith("anomaly no_progress at ") and ": failed: " in lines[1]
    assert lines[2].startswith("  moves: ") and "think@" in lines[2] and "act@" in lines[2]
    assert lines[3] == f"  mood: {ABSENT}"
    assert anomaly_lines(RunState("r", "w", 1)) == []


# -- the anomaly block of a definition ----------------------------------------------------


def _spec(anomaly: object, **nodes: Any) -> dict[str, Any]:
    return {
        "name": "w",
        "version": 1,
        "start": "a",
        "max_visits": 5,
        "anomaly": anomaly,
        "nodes": {
            "a": {
                "handler": "tests.unit.handlers:noop",
                "branch": {
                    "guard": "tests.unit.handlers:by_flag",
                    "cases": {"true": "done", "false": "a"},
                },
            },
            "done": {"end": "succeeded"},
            **nodes,
        },
    }


def _faults(anomaly: object, **nodes: Any) -> list[tuple[str, str]]:
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_definition(_spec(anomaly, **nodes))
    return [(fault.code, fault.message) for fault in caught.value.faults]


def test_the_anomaly_block_compiles_with_its_defaults() -> None:
    text = """
name: w
version: 1
start: a
max_visits: 5
anomaly:
  fingerprint: {fields: [answer, plan], ignore: [plan]}
  no_progress: {steps: 5}
  ping_pong: true
  oscillation: {fields: [amount]}
  on_detect: {hint: "try again", reset: [scratch], interventions: 2, then: "wait:review"}
nodes:
  a: {handler: "tests.unit.handlers:noop", next: review}
  review: {wait: {signals: {go: a, stop: done}, timeout: 1h, on_timeout: done}}
  done: {end: succeeded}
"""
    definition = load_definition(parse_text(text))
    assert definition.anomaly == AnomalyPolicy(
        no_progress=NoProgressRule(steps=5),
        ping_pong=PingPongRule(max_period=3, repeats=3),
        oscillation=OscillationRule(fields=("amount",), window=12, returns=3),
        fields=("answer", "plan"),
        ignore=("plan",),
        hint="try again",
        drop=("scratch",),
        interventions=2,
        handoff="review",
    )
    assert definition.anomaly.kinds == (
        AnomalyKind.NO_PROGRESS,
        AnomalyKind.PING_PONG,
        AnomalyKind.OSCILLATION,
    )
    assert definition.spec["anomaly"]["ping_pong"] is True
    # The builder form is the same definition.
    wf = Workflow(
        "w",
        version=1,
        max_visits=5,
        anomaly={
            "fingerprint": {"fields": ["answer", "plan"], "ignore": ["plan"]},
            "no_progress": {"steps": 5},
            "ping_pong": True,
            "oscillation": {"fields": ["amount"]},
            "on_detect": {
                "hint": "try again",
                "reset": ["scratch"],
                "interventions": 2,
                "then": "wait:review",
            },
        },
    )
    wf.task("a", NOOP, next="review")
    wf.wait("review", signals={"go": "a", "stop": "done"}, timeout="1h", on_timeout="done")
    assert wf.end("done").build() == definition
    assert load_definition(_spec({"no_progress": True})).anomaly == AnomalyPolicy(
        no_progress=NoProgressRule(steps=6)
    )
    assert load_definition(_spec(None)).anomaly is None
    assert "anomaly" not in load_definition(_spec(None)).extra


@pytest.mark.parametrize(
    ("anomaly", "message"),
    [
        ({"no_progress": {"steps": 0}}, "anomaly.no_progress.steps must be an integer from 1"),
        ({"no_progress": {"steps": True}}, "anomaly.no_progress.steps must be an integer"),
        ({"no_progress": {"steps": "5"}}, "anomaly.no_progress.steps must be an integer"),
        (
            {"ping_pong": {"max_period": 1}},
            "anomaly.ping_pong.max_period must be an integer from 2 to 8",
        ),
        (
            {"ping_pong": {"repeats": 100}},
            "anomaly.ping_pong.repeats must be an integer from 2 to 16",
        ),
        ({"ping_pong": 3}, "anomaly.ping_pong must be a mapping"),
        ({"oscillation": {"window": 5}}, "anomaly.oscillation.fields must list the state fields"),
        ({"oscillation": {"fields": "amount"}}, "anomaly.oscillation.fields must be a list"),
        ({"oscillation": {"fields": ["x"], "returns": 0}}, "anomaly.oscillation.returns must be"),
        ({}, "anomaly turns on no detector"),
        ({"no_progress": False}, "anomaly turns on no detector"),
        ("on", "anomaly must be a mapping"),
        (
            {"no_progress": True, "fingerprint": {"ignore": [1]}},
            "anomaly.fingerprint.ignore must be a list",
        ),
        (
            {"no_progress": True, "on_detect": {"then": "cancel"}},
            "anomaly.on_detect.then is 'fail' or",
        ),
        (
            {"no_progress": True, "on_detect": {"then": "wait:"}},
            "anomaly.on_detect.then is 'fail' or",
        ),
        ({"no_progress": True, "on_detect": {"hint": ""}}, "anomaly.on_detect.hint must be text"),
        (
            {"no_progress": True, "on_detect": {"interventions": -1}},
            "anomaly.on_detect.interventions",
        ),
        (
            {"no_progress": True, "on_detect": {"reset": "x"}},
            "anomaly.on_detect.reset must be a list",
        ),
    ],
)
def test_a_bad_anomaly_block_is_a_typed_fault_naming_the_field(
    anomaly: object, message: str
) -> None:
    faults = _faults(anomaly)
    assert len(faults) == 1, faults
    code, text = faults[0]
    assert code == "bad_anomaly"
    assert message in text


@pytest.mark.parametrize(
    ("anomaly", "expected"),
    [
        (
            {"no_progress": {"step": 5}},
            [
                (
                    "unknown_key",
                    "unknown key 'step' in 'anomaly.no_progress' (did you mean 'steps'?)",
                )
            ],
        ),
        (
            {"no_progres": True},
            [
                (
                    "unknown_key",
                    "unknown key 'no_progres' in 'anomaly' (did you mean 'no_progress'?)",
                ),
                (
                    "bad_anomaly",
                    "anomaly turns on no detector: give no_progress, ping_pong or oscillation",
                ),
            ],
        ),
        (
            {"no_progress": True, "fingerprint": {"field": ["x"]}},
            [
                (
                    "unknown_key",
                    "unknown key 'field' in 'anomaly.fingerprint' (did you mean 'fields'?)",
                )
            ],
        ),
        (
            {"no_progress": True, "on_detect": {"hints": "x"}},
            [("unknown_key", "unknown key 'hints' in 'anomaly.on_detect' (did you mean 'hint'?)")],
        ),
    ],
)
def test_a_misspelt_anomaly_key_is_named_with_a_suggestion(
    anomaly: object, expected: list[tuple[str, str]]
) -> None:
    assert _faults(anomaly) == expected


def test_the_hand_off_must_be_a_wait_that_exists_and_its_loop_bounded() -> None:
    assert _faults({"no_progress": True, "on_detect": {"then": "wait:nobody"}}) == [
        ("unknown_target", "anomaly.on_detect.then hands off to 'nobody', which is not a node")
    ]
    (fault,) = _faults({"no_progress": True, "on_detect": {"then": "wait:done"}})
    assert fault[0] == "bad_anomaly" and "which is a end node, not a wait" in fault[1]
    # A review reachable only through the hand-off is reachable; its loop back needs a bound.
    review = {"wait": {"signals": {"go": "a"}, "timeout": "1h", "on_timeout": "done"}}
    definition = load_definition(
        _spec({"no_progress": True, "on_detect": {"then": "wait:review"}}, review=review)
    )
    assert definition.anomaly is not None and definition.anomaly.handoff == "review"
    spec = _spec({"no_progress": True, "on_detect": {"then": "wait:review"}}, review=review)
    del spec["max_visits"]
    spec["nodes"]["a"] = {"handler": "tests.unit.handlers:noop", "next": "done"}
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_definition(spec)
    assert caught.value.codes == ["unbounded_cycle"]
    # Without the hand-off, the same review is unreachable.
    spec = _spec({"no_progress": True}, review=review)
    with pytest.raises(WorkflowDefinitionError) as caught:
        load_definition(spec)
    assert caught.value.codes == ["unreachable"]
