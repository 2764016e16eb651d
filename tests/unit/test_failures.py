"""Failure classification, and rollback in the decider."""

from __future__ import annotations

import urllib.error
from typing import Any

import pytest

import cairn
from cairn.errors import IllegalTransition
from cairn.orchestrator.commands import CancelNode, Dispatch
from cairn.orchestrator.definition import ErrorClass
from cairn.orchestrator.events import Phase, RollbackRequested
from cairn.orchestrator.explain import waiting_lines
from cairn.orchestrator.statuses import NodeStatus, RunStatus
from cairn.orchestrator.transitions import transition_table
from cairn.workers.classify import classify
from tests.unit import handlers
from tests.unit.driving import Driver

NOOP = handlers.noop


class _Response:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class HTTPStatusError(Exception):  # the shape of httpx's and requests' errors
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.response = _Response(status_code)


class ReadTimeout(Exception):  # a client library's timeout, not derived from TimeoutError
    pass


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (cairn.TransientError("try again"), ErrorClass.TRANSIENT),
        (cairn.PermanentError("no"), ErrorClass.PERMANENT),
        (cairn.BusinessError("declined"), ErrorClass.BUSINESS),
        (cairn.classified(KeyError("x"), "transient"), ErrorClass.TRANSIENT),
        (TimeoutError(), ErrorClass.TRANSIENT),
        (ConnectionResetError(), ErrorClass.TRANSIENT),
        (ReadTimeout(), ErrorClass.TRANSIENT),
        (HTTPStatusError(429), ErrorClass.TRANSIENT),
        (HTTPStatusError(502), ErrorClass.TRANSIENT),
        (HTTPStatusError(503), ErrorClass.TRANSIENT),
        (HTTPStatusError(504), ErrorClass.TRANSIENT),
        (HTTPStatusError(400), ErrorClass.PERMANENT),
        (HTTPStatusError(404), ErrorClass.PERMANENT),
        (urllib.error.HTTPError("http://x", 503, "busy", {}, None), ErrorClass.TRANSIENT),  # type: ignore[arg-type]
        (urllib.error.HTTPError("http://x", 403, "no", {}, None), ErrorClass.PERMANENT),  # type: ignore[arg-type]
        (PermissionError(), ErrorClass.PERMANENT),
        (ValueError("bad argument"), ErrorClass.PERMANENT),
        (RuntimeError("unknown"), ErrorClass.PERMANENT),
    ],
)
def test_errors_are_classified(error: BaseException, expected: ErrorClass) -> None:
    assert classify(error) is expected


def booking(**options: Any) -> cairn.Workflow:
    return (
        cairn.Workflow("booking", **options)
        .task("reserve", NOOP, next="charge", compensate=handlers.undo)
        .task("charge", NOOP, next="confirm", compensate=handlers.undo)
        .wait("confirm", signals={"confirmed": "done"}, timeout="1h", on_timeout="done")
        .end("done")
    )


def test_rollback_of_a_waiting_run_compensates_last_first_and_ends_rolled_back() -> None:
    driver = Driver(booking().build())
    driver.start()
    driver.succeed("reserve")
    driver.succeed("charge")
    assert driver.state.status is RunStatus.WAITING
    driver.apply(RollbackRequested(at=driver.tick(), actor="alice"))
    assert driver.state.nodes["confirm"].status is NodeStatus.CANCELLED
    assert driver.dispatched == [Dispatch("charge", 1, 1, Phase.COMPENSATE)]
    driver.run("charge")
    driver.run("reserve")
    assert driver.state.status is RunStatus.ROLLED_BACK
    assert ("*", "rollback", "(rolled_back)") in driver.path


def test_rollback_of_a_running_run_drains_it_first() -> None:
    driver = Driver(booking().build())
    driver.start()
    driver.succeed("reserve")
    decision = driver.apply(RollbackRequested(at=driver.tick()))
    assert driver.state.status is RunStatus.CANCELLING  # charge is still running
    assert any(isinstance(c, CancelNode) for c in decision.commands)
    driver.succeed("charge")  # it finished anyway: its effect is undone too
    assert [d.node for d in driver.dispatched] == ["charge"]
    driver.run("charge")
    driver.run("reserve")
    assert driver.state.status is RunStatus.ROLLED_BACK


def test_a_rollback_with_nothing_to_undo_ends_at_once() -> None:
    driver = Driver(
        cairn.Workflow("w")
        .wait("ask", signals={"ok": "done"}, timeout="1h", on_timeout="done")
        .end("done")
        .build()
    )
    driver.start()
    driver.apply(RollbackRequested(at=driver.tick()))
    assert driver.state.status is RunStatus.ROLLED_BACK


def test_a_finished_run_cannot_be_rolled_back() -> None:
    driver = Driver(booking().build())
    driver.start()
    driver.succeed("reserve")
    driver.succeed("charge")
    driver.signal("confirmed")
    with pytest.raises(IllegalTransition, match="finished"):
        driver.apply(RollbackRequested(at=driver.tick()))


def test_status_explains_a_retry_with_its_attempt_and_when() -> None:
    wf = (
        cairn.Workflow("w")
        .task("call", NOOP, next="done", retry={"attempts": 5, "backoff": "4s", "jitter": "none"})
        .end("done")
    )
    driver = Driver(wf.build())
    driver.start()
    driver.fail("call", ErrorClass.TRANSIENT, "HTTP 503")
    driver.fire("retry:call")
    driver.fail("call", ErrorClass.TRANSIENT, "HTTP 503")
    (line,) = waiting_lines(driver.definition, driver.state, driver.at + 3.8)
    assert line == "call#1: retrying (attempt 3/5, next in 4.2 s) after transient error: HTTP 503"


def test_rollback_to_a_checkpoint_undoes_only_later_steps_then_resumes_from_it() -> None:
    driver = Driver(booking().build())
    driver.start()
    driver.succeed("reserve", {"seat": "12A"})
    at_checkpoint = driver.state  # charge was in progress here
    driver.succeed("charge", {"charge_id": "ch_1"})
    assert driver.state.status is RunStatus.WAITING
    driver.apply(
        RollbackRequested(
            at=driver.tick(), reason="wrong card", to_seq=2, rewind=at_checkpoint.to_dict()
        )
    )
    assert driver.dispatched == [Dispatch("charge", 1, 1, Phase.COMPENSATE)]  # not reserve
    driver.run("charge")
    # Back at the checkpoint: charge runs again, as a new visit (its key is never reused).
    assert driver.state.status is RunStatus.RUNNING
    assert driver.dispatched == [Dispatch("charge", 2, 1)]
    assert "charge_id" not in driver.state.vars and driver.state.vars["seat"] == "12A"
    assert [(s.node, s.iteration) for s in driver.state.compensable] == [("reserve", 1)]
    assert ("(rewind)", "rewind", "charge") in driver.path
    driver.succeed("charge", {"charge_id": "ch_2"})
    driver.signal("confirmed")
    assert driver.state.status is RunStatus.SUCCEEDED
    assert driver.state.vars["charge_id"] == "ch_2"


def test_rollback_of_one_step_undoes_only_its_change_and_goes_on() -> None:
    driver = Driver(booking().build())
    driver.start()
    driver.succeed("reserve", {"seat": "12A"})
    driver.succeed("charge", {"charge_id": "ch_1"})
    driver.apply(RollbackRequested(at=driver.tick(), reason="seat upgrade", step="reserve"))
    assert driver.dispatched == [Dispatch("reserve", 1, 1, Phase.COMPENSATE)]
    driver.run("reserve")
    # The run goes on from where it was: waiting again (a new visit), charge kept.
    assert driver.state.status is RunStatus.WAITING
    assert driver.state.nodes["confirm"].iteration == 2
    assert [(s.node, s.iteration) for s in driver.state.compensable] == [("charge", 1)]
    assert driver.state.vars["charge_id"] == "ch_1"
    with pytest.raises(cairn.EventRejected, match="no change to undo"):  # undone already
        driver.apply(RollbackRequested(at=driver.tick(), step="reserve"))


# -- the default retry policy and node timeout (definition format 2) --------------------


def one_call(**options: Any) -> cairn.Workflow:
    return cairn.Workflow("w").task("call", NOOP, next="done", **options).end("done")


def test_a_task_without_retry_retries_a_transient_failure_by_the_default_policy() -> None:
    driver = Driver(one_call().build())
    driver.start()
    for attempt in (1, 2):
        driver.fail("call", ErrorClass.TRANSIENT, "HTTP 503")
        assert driver.state.nodes["call"].status is NodeStatus.RETRYING
        delay = driver.timers[f"retry:call:1:{attempt}"] - driver.at
        (line,) = waiting_lines(driver.definition, driver.state, driver.at)
        assert line.startswith(f"call#1: retrying (attempt {attempt + 1}/3")
        assert 0 <= delay <= 2 ** (attempt - 1)  # full jitter: under 1 s, then under 2 s
        driver.fire("retry:call")
        assert driver.dispatched == [Dispatch("call", 1, attempt + 1)]
    driver.fail("call", ErrorClass.TRANSIENT, "HTTP 503")  # the third try was the last
    assert driver.state.nodes["call"].status is NodeStatus.FAILED
    assert driver.state.status is RunStatus.FAILED
    assert driver.path.count(("call", "retry", "call")) == 2


def test_the_default_retries_only_transient_failures() -> None:
    for error_class in (ErrorClass.PERMANENT, ErrorClass.BUSINESS):
        driver = Driver(one_call().build())
        driver.start()
        driver.fail("call", error_class)
        assert driver.state.status is RunStatus.FAILED
        assert not any(timer.startswith("retry:") for timer in driver.timers)


@pytest.mark.parametrize(
    "options",
    [{"retry": "none"}, {"irreversible": True}, {"retry": {"attempts": 1}}],
    ids=["retry none", "irreversible", "one attempt"],
)
def test_a_transient_failure_fails_at_once_without_the_default(options: dict[str, Any]) -> None:
    driver = Driver(one_call(**options).build())
    driver.start()
    driver.fail("call", ErrorClass.TRANSIENT, "HTTP 503")
    assert driver.state.nodes["call"].status is NodeStatus.FAILED
    assert driver.state.status is RunStatus.FAILED


def test_the_default_node_timeout_stops_a_node_and_retries_it() -> None:
    driver = Driver(one_call().build())
    driver.start()
    assert driver.timers["node_timeout:call:1:1"] == pytest.approx(driver.at + 3600)
    decision = driver.fire("node_timeout:call")
    assert CancelNode("call", 1, 1, "timed out") in decision.commands
    assert driver.state.nodes["call"].status is NodeStatus.RETRYING
    assert driver.state.nodes["call"].error == "timed out after 1h"
    driver.fire("retry:call")
    assert driver.dispatched[-1] == Dispatch("call", 1, 2)
    assert "node_timeout:call:1:2" in driver.timers  # each attempt is bounded anew


def test_node_timeout_none_and_format_1_arm_no_timer_and_do_not_retry() -> None:
    unbounded = cairn.Workflow("w", node_timeout="none").task("call", NOOP, next="done")
    driver = Driver(unbounded.end("done").build())
    driver.start()
    assert driver.timers == {}
    old = cairn.Workflow("w", format=1).task("call", NOOP, next="done").end("done")
    driver = Driver(old.build())
    driver.start()
    assert driver.timers == {}
    driver.fail("call", ErrorClass.TRANSIENT, "HTTP 503")
    assert driver.state.status is RunStatus.FAILED  # what a format 1 file always meant


def test_the_transition_table_shows_the_effective_timeout_and_retry() -> None:
    definition = (
        cairn.Workflow("w")
        .task("call", NOOP, next="pay")
        .task("pay", NOOP, next="done", irreversible=True, timeout="5m")
        .end("done")
        .build()
    )
    rows = {(r.source, r.event): r.guard for r in transition_table(definition)}
    assert rows["call", "retry"] == "transient failure or timed out after 1h, attempt < 3"
    assert rows["call", "failed:transient"] == "retries exhausted"
    assert ("pay", "retry") not in rows
    assert rows["pay", "failed:transient"] == "transient failure or timed out after 5m"
