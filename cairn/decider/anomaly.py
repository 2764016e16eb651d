"""Runtime anomaly detection: loops that make no progress, calls that ping-pong, state
that oscillates. Pure functions of the run state, called by the decider each time a run
moves into a node (see :mod:`cairn.decider.watch`).

Everything a detector needs to remember lives in the state (:class:`AnomalyTrack`,
bounded), and nothing here reads a clock: replaying a history detects the same anomalies
at the same steps. Detection counts moves along the graph, never seconds, so a step that
thinks for an hour is one step, not a loop.

- **no progress** — the *fingerprint* (a digest of the state's significant fields and of
  every artifact's content) stayed the same for ``steps`` moves in a row, and some node
  came round again among them: a loop going nowhere. A chain of different nodes that
  write nothing (log, notify, send) is not a loop.
- **ping-pong** — the last calls are one block of 2..``max_period`` calls repeated
  ``repeats`` times (A-B-A-B-A-B). A node call is the node *with the fingerprint it was
  entered with*: an agent loop (think → act → observe) is periodic by design, and only
  repeats a call when it comes back to the same state. A tool call — found in the
  messages a step adds, in the OpenAI (``tool_calls``) or Anthropic (``tool_use``) form —
  is the tool with its arguments.
- **oscillation** — within the last ``window`` moves, a watched field went back
  ``returns`` times to a value it had held earlier in the window (x: 1, 2, 1, 2; an
  amount 100, 120, 100, 120). Revisiting exact values is the test, not direction
  changes: a binary search or a converging negotiation goes up and down legitimately.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from cairn.model.definition import (
    AnomalyKind,
    AnomalyPolicy,
    EndNode,
    OscillationRule,
    WorkflowDefinition,
)
from cairn.model.state import AnomalyTrack

# 64 bits of SHA-256: enough to tell a run's own states apart, short enough to keep
# dozens of them in every snapshot.
DIGEST_CHARS = 16
VALUE_CHARS = 64  # a value shorter than this is kept (and shown) as itself
SCENE_MOVES = 24  # moves kept for the scene, whatever the detectors need less
ABSENT = "(absent)"  # not JSON, so no value's key can be mistaken for it

_T = TypeVar("_T", bound=Hashable)


@dataclass(frozen=True)
class Anomaly:
    kind: AnomalyKind
    detail: str
    scene: dict[str, Any]  # JSON data: what the run did as it was caught


def canonical(value: Any) -> str:
    """One text per value, whatever the order its mappings were built in."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
        )
    except (TypeError, ValueError):  # keys that cannot be sorted, circular data
        return repr(value)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def fingerprint(
    variables: Mapping[str, Any],
    artifacts: Mapping[str, Any],
    fields: Sequence[str] = (),
    ignore: Sequence[str] = (),
) -> str:
    """The digest of what counts as progress: the state fields ``fields`` (all if empty)
    less ``ignore``, and each artifact's content (its sha256; its version when it has
    none). Content rather than version: a new version of the same draft is no progress.
    A field that is absent differs from one that is null."""
    chosen = fields or sorted(variables)
    significant = {
        name: variables[name] for name in chosen if name in variables and name not in ignore
    }
    contents = {
        name: (ref.get("sha256") or ref.get("version")) if isinstance(ref, Mapping) else ref
        for name, ref in artifacts.items()
    }
    return digest(canonical({"vars": significant, "artifacts": contents}))


def value_key(value: Any) -> str:
    """A value as it is compared and shown: its canonical JSON, or (if long) a digest."""
    text = canonical(value)
    return text if len(text) <= VALUE_CHARS else f"sha256:{digest(text)}"


def tool_calls(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tool calls in ``messages``, each as ``"name arguments"``: OpenAI's
    ``tool_calls`` (and the older ``function_call``) and Anthropic's ``tool_use`` blocks.
    Anything else — text, tool results, malformed entries — is not a call."""
    found = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        for name, arguments in _calls_in(message):
            if isinstance(name, str) and name:
                found.append(f"{name} {value_key(_parsed(arguments))}")
    return found


def _calls_in(message: Mapping[str, Any]) -> Iterator[tuple[object, object]]:
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, Mapping):
            function = call.get("function")
            spec = function if isinstance(function, Mapping) else call
            yield spec.get("name"), spec.get("arguments")
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        yield legacy.get("name"), legacy.get("arguments")
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, Mapping) and block.get("type") == "tool_use":
            yield block.get("name"), block.get("input")


def _parsed(arguments: object) -> object:
    """OpenAI sends arguments as JSON text: the same call written with other spacing or
    key order is the same call."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def repeating_block(calls: Sequence[_T], max_period: int, repeats: int) -> tuple[_T, ...] | None:
    """The shortest block of 2..``max_period`` calls, with at least two different calls in
    it, that the last ``period * repeats`` calls repeat; None if there is none. (One call
    over and over is not a ping-pong: with the state unchanged, it is no progress.)"""
    for period in range(2, max_period + 1):
        span = period * repeats
        if len(calls) < span:
            break
        tail = calls[-span:]
        block = tuple(tail[:period])
        if len(set(block)) > 1 and all(tail[i] == tail[i - period] for i in range(period, span)):
            return block
    return None


def in_window(
    changes: Sequence[tuple[int, str]], now: int, window: int
) -> tuple[tuple[int, str], ...]:
    """The changes within the last ``window`` moves, after the value held when the
    window began (if it changed before that): going back to it is a return too."""
    start = now - window
    inside = [change for change in changes if change[0] > start]
    before = [change for change in changes if change[0] <= start]
    return tuple(before[-1:] + inside)


def returns(changes: Sequence[tuple[int, str]]) -> int:
    """How many changes went back to a value held earlier in ``changes``."""
    seen: set[str] = set()
    count = 0
    for index, (_step, value) in enumerate(changes):
        if index and value in seen:
            count += 1
        seen.add(value)
    return count


def watched(definition: WorkflowDefinition, node_id: str) -> bool:
    """Moves into this node are observed: every node but the ends (the run is over) and
    parallel branches (they all start from the fan-out's state, so counting them would
    make every wide fan-out look like a loop)."""
    return (
        definition.anomaly is not None
        and not isinstance(definition.nodes[node_id], EndNode)
        and node_id not in definition.branch_parents
    )


def trail_length(policy: AnomalyPolicy) -> int:
    ping_pong = policy.ping_pong
    needed = ping_pong.max_period * ping_pong.repeats if ping_pong is not None else 0
    return max(SCENE_MOVES, needed)


def cleared(track: AnomalyTrack) -> AnomalyTrack:
    """The track after a detection was answered: the pattern has to build up again from
    scratch before it counts again. The step clock and the interventions stay."""
    return AnomalyTrack(steps=track.steps, interventions=track.interventions)


def note_tools(
    policy: AnomalyPolicy, track: AnomalyTrack | None, messages: Iterable[Mapping[str, Any]]
) -> AnomalyTrack | None:
    """``track`` with the tool calls in a step's new messages added."""
    if policy.ping_pong is None:
        return track
    calls = tool_calls(messages)
    if not calls:
        return track
    track = track or AnomalyTrack()
    keep = policy.ping_pong.max_period * policy.ping_pong.repeats
    return replace(track, tools=(*track.tools, *calls)[-keep:])


def observe(
    policy: AnomalyPolicy,
    track: AnomalyTrack | None,
    variables: Mapping[str, Any],
    artifacts: Mapping[str, Any],
    node: str,
) -> tuple[AnomalyTrack, Anomaly | None]:
    """The run moves into ``node`` with this state: the updated track, and the anomaly
    this move completes (the first found of no progress, ping-pong, oscillation)."""
    track = track or AnomalyTrack()
    current = fingerprint(variables, artifacts, policy.fields, policy.ignore)
    step = track.steps + 1
    if track.trail and track.trail[-1][1] == current:
        streak, looped = track.streak + 1, track.looped or node in track.nodes
        nodes = track.nodes if node in track.nodes else (*track.nodes, node)
    else:
        streak, looped, nodes = 0, False, (node,)
    values = dict(track.values)
    if policy.oscillation is not None:
        for name in policy.oscillation.fields:
            value = value_key(variables[name]) if name in variables else ABSENT
            changes = values.get(name, ())
            if not changes or changes[-1][1] != value:
                changes = (*changes, (step, value))
            values[name] = in_window(changes, step, policy.oscillation.window)
    track = replace(
        track,
        steps=step,
        trail=(*track.trail, (node, current))[-trail_length(policy) :],
        streak=streak,
        nodes=nodes,
        looped=looped,
        values=values,
    )
    found = _no_progress(policy, track) or _ping_pong(policy, track) or _oscillation(policy, track)
    return track, found


def scene(track: AnomalyTrack) -> dict[str, Any]:
    """What the run was doing when it was caught, as JSON data: the fingerprints of its
    last moves, its last tool calls, and the changes of the watched fields."""
    return {
        "step": track.steps,
        "fingerprint": track.trail[-1][1] if track.trail else None,
        "moves": [[node, fp] for node, fp in track.trail[-SCENE_MOVES:]],
        "tools": list(track.tools),
        "transitions": {
            name: [[step, value] for step, value in changes]
            for name, changes in track.values.items()
        },
    }


def _no_progress(policy: AnomalyPolicy, track: AnomalyTrack) -> Anomaly | None:
    rule = policy.no_progress
    if rule is None or track.streak < rule.steps or not track.looped:
        return None
    current = track.trail[-1][1]
    detail = (
        f"{track.streak} moves in a row left the state unchanged (fingerprint {current}), "
        f"going round {' -> '.join(track.nodes)}"
    )
    return Anomaly(AnomalyKind.NO_PROGRESS, detail, {**scene(track), "streak": track.streak})


def _ping_pong(policy: AnomalyPolicy, track: AnomalyTrack) -> Anomaly | None:
    rule = policy.ping_pong
    if rule is None:
        return None
    nodes = repeating_block(track.trail, rule.max_period, rule.repeats)
    if nodes is not None:
        calls = [f"{node}@{fp}" for node, fp in nodes]
        detail = (
            f"the nodes {' -> '.join(node for node, _ in nodes)} came round {rule.repeats} "
            "times, each time in the same state"
        )
        return Anomaly(AnomalyKind.PING_PONG, detail, {**scene(track), "block": calls})
    tools = repeating_block(track.tools, rule.max_period, rule.repeats)
    if tools is not None:
        detail = f"the tool calls {' -> '.join(tools)} repeated {rule.repeats} times"
        return Anomaly(AnomalyKind.PING_PONG, detail, {**scene(track), "block": list(tools)})
    return None


def _oscillation(policy: AnomalyPolicy, track: AnomalyTrack) -> Anomaly | None:
    rule: OscillationRule | None = policy.oscillation
    if rule is None:
        return None
    for name in rule.fields:
        changes = track.values.get(name, ())
        count = returns(changes)
        if count >= rule.returns:
            path = " -> ".join(value for _step, value in changes)
            detail = (
                f"{name} went back to an earlier value {count} times within {rule.window} "
                f"moves: {path}"
            )
            return Anomaly(AnomalyKind.OSCILLATION, detail, {**scene(track), "field": name})
    return None


__all__ = [
    "ABSENT",
    "Anomaly",
    "canonical",
    "cleared",
    "fingerprint",
    "in_window",
    "note_tools",
    "observe",
    "repeating_block",
    "returns",
    "scene",
    "tool_calls",
    "trail_length",
    "value_key",
    "watched",
]
