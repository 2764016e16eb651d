"""A failure that repeats is logged once in full, then a line a minute, then its end."""

from __future__ import annotations

import logging

import pytest

from cairn import repeats
from cairn.repeats import Repeats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(repeats.time, "monotonic", found)
    return found


def test_the_first_failure_in_full_then_one_line_a_minute(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    said = Repeats(logging.getLogger("t"), every_s=60)
    error = RuntimeError("no table")
    with caplog.at_level(logging.INFO, logger="t"):
        assert said.failed("pass", "pass failed", error)
        for _ in range(119):  # twice a second for a minute, less half a second
            clock.now += 0.5
            assert not said.failed("pass", "pass failed", error)
        clock.now += 0.5
        assert said.failed("pass", "pass failed", error)
        said.recovered("pass", "passes again")
    first, again, back = caplog.records
    assert first.exc_info is not None and first.getMessage() == "pass failed: no table"
    assert again.exc_info is None
    assert again.getMessage() == (
        "pass failed: no table (still failing: 120 more time(s) in the last 60 s)"
    )
    assert back.getMessage() == "passes again" and not said.failing("pass")


def test_keys_are_throttled_apart_and_a_fault_goes_without_traceback(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    said = Repeats(logging.getLogger("t"))
    with caplog.at_level(logging.INFO, logger="t"):
        assert said.failed("a", "a failed", ValueError("x"), traceback=False)
        assert said.failed("b", "b failed", ValueError("y"))
        assert not said.failed("a", "a failed", ValueError("x"))
        said.recovered("c", "never failed")  # says nothing
    assert [r.getMessage() for r in caplog.records] == ["a failed: x", "b failed: y"]
    assert caplog.records[0].exc_info is None and caplog.records[1].exc_info is not None
