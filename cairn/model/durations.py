"""Durations as people write them in definitions ("24h", "0.5s", "1h30m") and back."""

from __future__ import annotations

import math
import re
from datetime import timedelta

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(value: object) -> timedelta:
    """Parse ``"24h"``, ``"0.5s"``, ``"1h30m"``, ``"250ms"`` or a number of seconds.

    Raises :class:`ValueError` with a message fit for a definition fault. Zero and
    negative durations are refused: every duration cairn reads is a wait, a delay or a
    deadline, and none of those may be empty or run backwards.
    """
    if isinstance(value, bool):  # bool is an int; "timeout: true" is a mistake, not 1 second
        raise ValueError(f"expected a duration like '30s' or '24h', got {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if not text or _PART.sub("", text):
            raise ValueError(
                f"expected a duration like '30s', '5m', '24h' or '1h30m', got {value!r}"
            )
        seconds = sum(float(num) * _UNIT_SECONDS[unit] for num, unit in _PART.findall(text))
    else:
        raise ValueError(f"expected a duration like '30s' or '24h', got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be positive and finite, got {value!r}")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """An exact spelling in h/m/s: ``timedelta(hours=24)`` → ``"24h"``, 0.5 s → ``"500ms"``."""
    millis = round(value.total_seconds() * 1000)
    if millis % 1000:
        return f"{millis}ms"
    seconds = millis // 1000
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
