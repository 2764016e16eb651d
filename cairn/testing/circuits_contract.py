"""The contract a circuits backend (:class:`~cairn.limits.circuits.Circuits`) keeps:
subclass :class:`CircuitsContract` as ``Test...`` beside a ``circuits`` fixture yielding
a fresh backend (``tests/contract/test_circuits.py`` runs it on memory and Redis). The
open interval is waited out for real: only a real clock proves the backend's."""

from __future__ import annotations

import time
from datetime import timedelta

from cairn.limits.circuits import Change, CircuitLook, Circuits
from cairn.model.definition import Dependency

OPEN_FOR = 0.4
PAYMENTS = Dependency(
    "payments", failures=3, window=timedelta(seconds=30), open_for=timedelta(seconds=OPEN_FOR)
)


class CircuitsContract:
    def test_failures_of_distinct_runs_in_a_row_open_it(self, circuits: Circuits) -> None:
        assert circuits.limits(["payments"]) == {"payments": None}
        assert circuits.failed(PAYMENTS, "run-1") is None
        assert circuits.failed(PAYMENTS, "run-1") is None  # the same run again: still one
        assert circuits.failed(PAYMENTS, "run-2") is None
        (counting,) = circuits.reports()
        assert (counting.dependency, counting.state, counting.failures) == ("payments", "closed", 2)
        assert circuits.failed(PAYMENTS, "run-3") is Change.OPENED
        assert circuits.limits(["payments", "search"]) == {"payments": 0, "search": None}
        assert circuits.look(["payments"]) == {"payments": CircuitLook(0, counting=True)}
        (shown,) = circuits.reports()
        assert (shown.state, shown.failures, shown.opens) == ("open", 3, 1)
        assert shown.open_until is not None and shown.opened_at is not None
        assert 0 < shown.open_until - shown.opened_at <= OPEN_FOR + 0.01

    def test_a_success_between_failures_starts_the_count_again(self, circuits: Circuits) -> None:
        clean = CircuitLook(None, counting=False)
        assert circuits.look(["payments"]) == {"payments": clean}  # a success: nothing to tell
        assert circuits.failed(PAYMENTS, "run-1") is None
        assert circuits.failed(PAYMENTS, "run-2") is None
        assert circuits.look(["payments"]) == {"payments": CircuitLook(None, counting=True)}
        assert circuits.succeeded("payments") is None  # it was closed: nothing to close
        assert circuits.look(["payments"]) == {"payments": clean}
        assert circuits.reports() == []
        assert circuits.failed(PAYMENTS, "run-3") is None
        assert circuits.failed(PAYMENTS, "run-4") is None
        assert circuits.limits(["payments"]) == {"payments": None}

    def test_failures_older_than_the_window_do_not_count(self, circuits: Circuits) -> None:
        brief = Dependency("flaky", failures=2, window=timedelta(seconds=0.3))
        assert circuits.failed(brief, "run-1") is None
        time.sleep(0.45)
        assert circuits.failed(brief, "run-2") is None
        assert circuits.failed(brief, "run-3") is Change.OPENED

    def test_after_open_for_one_probe_closes_or_reopens_it(self, circuits: Circuits) -> None:
        for n in range(3):
            circuits.failed(PAYMENTS, f"run-{n}")
        assert circuits.failed(PAYMENTS, "straggler") is None  # began before it opened
        time.sleep(OPEN_FOR + 0.1)
        assert circuits.limits(["payments"]) == {"payments": 1}  # half-open: one probe
        assert circuits.reports()[0].state == "half_open"
        assert circuits.failed(PAYMENTS, "probe") is Change.REOPENED
        assert circuits.limits(["payments"]) == {"payments": 0}
        assert circuits.reports()[0].opens == 2
        time.sleep(OPEN_FOR + 0.1)
        assert circuits.succeeded("payments") is Change.CLOSED
        assert circuits.limits(["payments"]) == {"payments": None}
        assert circuits.reports() == []
        assert circuits.failed(PAYMENTS, "run-9") is None  # counting from nothing again
