from __future__ import annotations

from datetime import timedelta

import pytest

from cairn.model.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("24h", 86400),
        ("0.5s", 0.5),
        ("5m", 300),
        ("1h30m", 5400),
        ("250ms", 0.25),
        ("2d", 172800),
        ("1w", 604800),
        (30, 30),
        (1.5, 1.5),
        (" 10 s ", 10),
    ],
)
def test_parse(text: object, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "bad", ["", "24 hours", "abc", "-5s", "5", 0, -1, True, None, float("inf"), "1h-5m", [1]]
)
def test_parse_refuses(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("seconds", "text"), [(86400, "24h"), (0.5, "500ms"), (5400, "1h30m"), (61, "1m1s")]
)
def test_format_round_trips(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text
    assert parse_duration(text) == timedelta(seconds=seconds)
