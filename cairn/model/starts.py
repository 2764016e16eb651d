"""Which submissions start a run, as declared: debounce (rapid submissions collapse into one run)
and singleton (one unfinished run per key)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cairn.errors import InvalidInput
from cairn.model.durations import parse_duration

MAX_KEY = 200  # the key columns' length
MAX_WAIT_S = 366 * 86400.0  # keeps every start time inside what a timestamp column holds


class SingletonMode(StrEnum):
    SKIP = "skip"  # the unfinished run is the answer; nothing new starts
    CANCEL = "cancel"  # the unfinished run is cancelled; the new one starts


def _seconds(value: object, what: str) -> float:
    try:
        return parse_duration(value).total_seconds()
    except (ValueError, OverflowError) as exc:
        raise InvalidInput(f"{what}: {exc}") from None


def _key(key: object, what: str) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY or "\x00" in key:
        raise InvalidInput(f"a {what} key is 1-{MAX_KEY} characters of text, got {key!r}")
    return key


@dataclass(frozen=True)
class Debounce:
    """Submissions with ``key`` (in one namespace) less than ``wait_s`` apart are one run:
    it starts ``wait_s`` after the last of them, with the last one's input — but no later
    than ``max_wait_s`` after the first, if given."""

    key: str
    wait_s: float
    max_wait_s: float | None = None

    def __post_init__(self) -> None:
        _key(self.key, "debounce")
        if not (0 < self.wait_s <= MAX_WAIT_S):
            raise InvalidInput(
                f"a debounce wait must be positive and at most 366 days, got {self.wait_s!r}"
            )
        if self.max_wait_s is not None and not (self.wait_s <= self.max_wait_s <= MAX_WAIT_S):
            raise InvalidInput(
                f"a debounce max_wait must be at least its wait ({self.wait_s:g} s) and at "
                f"most 366 days, got {self.max_wait_s!r}"
            )

    @classmethod
    def of(cls, value: Debounce | Mapping[str, Any]) -> Debounce:
        """From ``{"key", "wait", "max_wait"?}`` (durations: ``"30s"`` or seconds)."""
        if isinstance(value, Debounce):
            return value
        unknown = set(value) - {"key", "wait", "max_wait"}
        if unknown or "key" not in value or "wait" not in value:
            raise InvalidInput("debounce is {key, wait, max_wait?}")
        max_wait = value.get("max_wait")
        return cls(
            value["key"],
            _seconds(value["wait"], "debounce wait"),
            None if max_wait is None else _seconds(max_wait, "debounce max_wait"),
        )


@dataclass(frozen=True)
class Singleton:
    """At most one unfinished run per ``key`` in a namespace: a submission while one is
    not terminal gets that run (``skip``) or cancels it and starts anew (``cancel``)."""

    key: str
    mode: SingletonMode = SingletonMode.SKIP

    def __post_init__(self) -> None:
        _key(self.key, "singleton")
        try:
            object.__setattr__(self, "mode", SingletonMode(self.mode))
        except ValueError:
            raise InvalidInput(
                f"a singleton mode is 'skip' or 'cancel', got {self.mode!r}"
            ) from None

    @classmethod
    def of(cls, value: Singleton | Mapping[str, Any]) -> Singleton:
        """From ``{"key", "mode"?}``."""
        if isinstance(value, Singleton):
            return value
        if set(value) - {"key", "mode"} or "key" not in value:
            raise InvalidInput("singleton is {key, mode?: skip|cancel}")
        return cls(value["key"], value.get("mode", SingletonMode.SKIP))
