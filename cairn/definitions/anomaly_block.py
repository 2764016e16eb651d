"""The ``anomaly:`` block: which detectors watch the run (no progress, ping-pong,
oscillation), over which state fields, and what a detection does (``on_detect``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.definitions import format as fmt
from cairn.definitions.reader import Reader
from cairn.model.definition import (
    AnomalyPolicy,
    NoProgressRule,
    OscillationRule,
    PingPongRule,
)

# The anomaly block's bounds: every history it asks for lives in the run state, written
# with every step, so no window may grow without limit.
ANOMALY_BOUNDS: dict[str, tuple[int, int]] = {
    "no_progress.steps": (1, 1000),
    "ping_pong.max_period": (2, 8),
    "ping_pong.repeats": (2, 16),
    "oscillation.window": (2, 200),
    "oscillation.returns": (1, 200),
    "on_detect.interventions": (0, 10),
}
HANDOFF_PREFIX = "wait:"


def read_anomaly(reader: Reader, raw: object) -> AnomalyPolicy | None:
    """The ``anomaly:`` block."""
    if raw is None:
        return None
    if not _known_keys(reader, raw, fmt.ANOMALY, "anomaly"):
        return None
    assert isinstance(raw, Mapping)
    fingerprint = raw.get("fingerprint", {})
    if not _known_keys(reader, fingerprint, fmt.FINGERPRINT, "anomaly.fingerprint"):
        fingerprint = {}
    on_detect = raw.get("on_detect", {})
    if not _known_keys(reader, on_detect, fmt.ON_DETECT, "anomaly.on_detect"):
        on_detect = {}
    detectors = _detectors(reader, raw)
    if not any(raw.get(name) for name in ("no_progress", "ping_pong", "oscillation")):
        reader.fault(
            "bad_anomaly",
            "anomaly turns on no detector: give no_progress, ping_pong or oscillation",
        )
        return None
    return AnomalyPolicy(
        **detectors,
        fields=_field_names(reader, fingerprint.get("fields"), "anomaly.fingerprint.fields"),
        ignore=_field_names(reader, fingerprint.get("ignore"), "anomaly.fingerprint.ignore"),
        interventions=_bounded(reader, on_detect, "on_detect.interventions", 1),
        **_on_detect(reader, on_detect),
    )


def _detectors(reader: Reader, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The detectors the block turns on: no_progress, ping_pong, oscillation."""
    found: dict[str, Any] = {"no_progress": None, "ping_pong": None, "oscillation": None}
    rule = _rule(reader, raw, "no_progress", fmt.NO_PROGRESS)
    if rule is not None:
        found["no_progress"] = NoProgressRule(steps=_bounded(reader, rule, "no_progress.steps", 6))
    rule = _rule(reader, raw, "ping_pong", fmt.PING_PONG)
    if rule is not None:
        found["ping_pong"] = PingPongRule(
            max_period=_bounded(reader, rule, "ping_pong.max_period", 3),
            repeats=_bounded(reader, rule, "ping_pong.repeats", 3),
        )
    rule = _rule(reader, raw, "oscillation", fmt.OSCILLATION)
    if rule is not None:
        watched = _field_names(reader, rule.get("fields"), "anomaly.oscillation.fields")
        if not rule.get("fields"):
            reader.fault(
                "bad_anomaly",
                "anomaly.oscillation.fields must list the state fields to watch",
            )
        elif watched:
            found["oscillation"] = OscillationRule(
                fields=watched,
                window=_bounded(reader, rule, "oscillation.window", 12),
                returns=_bounded(reader, rule, "oscillation.returns", 3),
            )
    return found


def _on_detect(reader: Reader, on_detect: Mapping[str, Any]) -> dict[str, Any]:
    """What a detection does: its hint, the state it drops or assigns, the hand-off."""
    hint = on_detect.get("hint")
    if hint is not None and (not isinstance(hint, str) or not hint.strip()):
        reader.fault("bad_anomaly", f"anomaly.on_detect.hint must be text, got {hint!r}")
        hint = None
    drop: tuple[str, ...] = ()
    assign: dict[str, Any] = {}
    reset = on_detect.get("reset")
    if isinstance(reset, Mapping):
        assign = {str(name): value for name, value in reset.items()}
    elif reset is not None:
        drop = _field_names(reader, reset, "anomaly.on_detect.reset")
    then = on_detect.get("then", "fail")
    handoff = None
    if isinstance(then, str) and then.startswith(HANDOFF_PREFIX):
        handoff = then[len(HANDOFF_PREFIX) :].strip() or None
    if handoff is None and then != "fail":
        reader.fault(
            "bad_anomaly",
            f"anomaly.on_detect.then is 'fail' or 'wait:<wait node>', got {then!r}",
        )
    return {"hint": hint, "drop": drop, "assign": assign, "handoff": handoff}


def _rule(
    reader: Reader, raw: Mapping[str, Any], name: str, keys: frozenset[str]
) -> Mapping[str, Any] | None:
    """A detector's settings: a mapping, or ``true`` for its defaults; None if off."""
    rule = raw.get(name)
    if rule is None or rule is False:
        return None
    if rule is True:
        return {}
    return rule if _known_keys(reader, rule, keys, f"anomaly.{name}") else None


def _known_keys(reader: Reader, raw: object, keys: frozenset[str], what: str) -> bool:
    """Whether an anomaly (sub)block is a mapping; its unknown keys are faulted."""
    if not isinstance(raw, Mapping):
        reader.fault("bad_anomaly", f"{what} must be a mapping of {sorted(keys)}, got {raw!r}")
        return False
    reader.closed(raw, keys, what, None, where=what)
    return True


def _bounded(reader: Reader, raw: Mapping[str, Any], what: str, default: int) -> int:
    low, high = ANOMALY_BOUNDS[what]
    value = raw.get(what.rpartition(".")[2], default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        reader.fault(
            "bad_anomaly",
            f"anomaly.{what} must be an integer from {low} to {high}, got {value!r}",
        )
        return default
    return value


def _field_names(reader: Reader, raw: object, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
        reader.fault("bad_anomaly", f"{what} must be a list of state field names, got {raw!r}")
        return ()
    return tuple(dict.fromkeys(raw))
