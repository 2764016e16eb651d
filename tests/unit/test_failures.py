"""Failure classification, and rollback in the decider."""

from __future__ import annotations

import http.client
import socket
import urllib.error
from dataclasses import replace
from typing import Any

import httpx
import psycopg
import pytest
import redis
import requests
import urllib3
from sqlalchemy import exc as sa_exc

import cairn
from cairn.definitions.transitions import transition_table
from cairn.errors import IllegalTransition, StoreUnavailable
from cairn.model.classify import classify, may_have_applied
from cairn.model.commands import CancelNode, Dispatch
from cairn.model.definition import ErrorClass
from cairn.model.events import (
    NodeFailed,
    Phase,
    RollbackRequested,
    event_from_dict,
    event_to_dict,
)
from cairn.model.statuses import NodeStatus, RunStatus
from cairn.observe.explain import waiting_lines
from cairn.testing.driver import Driver
from tests.unit import handlers

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
        (HTTPStatusError(500), ErrorClass.TRANSIENT),  # the server's trouble: may pass
        (HTTPStatusError(507), ErrorClass.TRANSIENT),
        (HTTPStatusError(501), ErrorClass.PERMANENT),  # "not implemented": no retry helps
        (HTTPStatusError(505), ErrorClass.PERMANENT),
        (HTTPStatusError(400), ErrorClass.PERMANENT),
        (HTTPStatusError(404), ErrorClass.PERMANENT),
        (urllib.error.HTTPError("http://x", 503, "busy", {}, None), ErrorClass.TRANSIENT),  # type: ignore[arg-type]
        (urllib.error.HTTPError("http://x", 403, "no", {}, None), ErrorClass.PERMANENT),  # type: ignore[arg-type]
        (urllib.error.HTTPError("http://x", 500, "oops", {}, None), ErrorClass.TRANSIENT),  # type: ignore[arg-type]
        (PermissionError(), ErrorClass.PERMANENT),
        (ValueError("bad argument"), ErrorClass.PERMANENT),
        (RuntimeError("unknown"), ErrorClass.PERMANENT),
    ],
)
def test_errors_are_classified(error: BaseException, expected: ErrorClass) -> None:
    assert classify(error) is expected


def _dbapi(orig: BaseException, *, invalidated: bool = False) -> sa_exc.DBAPIError:
    return sa_exc.DBAPIError.instance(
        "SELECT 1", {}, orig, psycopg.Error, connection_invalidated=invalidated
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        # cairn's own stores, away: never a permanent failure of the handler
        (psycopg.OperationalError("server closed the connection"), ErrorClass.TRANSIENT),
        (psycopg.InterfaceError("the connection is closed"), ErrorClass.TRANSIENT),
        (psycopg.errors.AdminShutdown("terminating connection"), ErrorClass.TRANSIENT),
        (_dbapi(psycopg.OperationalError("gone")), ErrorClass.TRANSIENT),
        (_dbapi(psycopg.InterfaceError("closed")), ErrorClass.TRANSIENT),
        (_dbapi(psycopg.DatabaseError("?"), invalidated=True), ErrorClass.TRANSIENT),
        (redis.ConnectionError("Connection refused"), ErrorClass.TRANSIENT),
        (redis.TimeoutError("Timeout reading from socket"), ErrorClass.TRANSIENT),
        (StoreUnavailable("the database was unreachable"), ErrorClass.TRANSIENT),
        # ... but what the database refused is the handler's doing
        (psycopg.errors.UniqueViolation("duplicate key"), ErrorClass.PERMANENT),
        (_dbapi(psycopg.errors.UniqueViolation("duplicate key")), ErrorClass.PERMANENT),
        (redis.ResponseError("WRONGTYPE"), ErrorClass.PERMANENT),
        # urllib wraps what failed while connecting: classified by what it wraps
        (urllib.error.URLError(ConnectionRefusedError(111, "refused")), ErrorClass.TRANSIENT),
        (urllib.error.URLError(socket.gaierror(-2, "unknown name")), ErrorClass.TRANSIENT),
        (urllib.error.URLError("unknown url type: nope"), ErrorClass.PERMANENT),
    ],
)
def test_outages_of_database_and_cache_drivers_are_transient(
    error: BaseException, expected: ErrorClass
) -> None:
    assert classify(error) is expected


class ConnectError(Exception):  # httpx's shape: raised for refusals and DNS failures
    pass


class PoolTimeout(Exception):  # httpx: no connection to send on
    pass


class RemoteProtocolError(Exception):  # httpx: the server hung up mid-answer
    pass


def _requests_error(reason: BaseException) -> requests.ConnectionError:
    """requests' ConnectionError, as it wraps urllib3's MaxRetryError(reason)."""
    wrapped = urllib3.exceptions.MaxRetryError(None, "/charges", reason)  # type: ignore[arg-type]
    return requests.ConnectionError(wrapped)


def _raised_from(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


def _raised_during(error: BaseException, context: BaseException) -> BaseException:
    error.__context__ = context  # an earlier failure, not what this one wraps
    return error


def _http_error(status: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError("http://x", status, "answer", {}, None)  # type: ignore[arg-type]


NEW_CONNECTION = urllib3.exceptions.NewConnectionError(None, "refused")  # type: ignore[arg-type]
DISCONNECTED = urllib3.exceptions.ProtocolError(
    "Connection aborted.", http.client.RemoteDisconnected("closed without response")
)


@pytest.mark.parametrize(
    ("error", "applied"),
    [
        # never sent: nothing can have taken effect
        (ConnectionRefusedError(111, "refused"), False),
        (socket.gaierror(-2, "Name or service not known"), False),
        (urllib.error.URLError(ConnectionRefusedError(111, "refused")), False),
        (urllib.error.URLError(TimeoutError("timed out")), False),  # while connecting
        (ConnectError("All connection attempts failed"), False),
        (httpx.ConnectError("refused"), False),
        (httpx.ConnectTimeout("timed out"), False),
        (PoolTimeout(), False),
        (requests.ConnectTimeout("connect timed out"), False),
        (_requests_error(NEW_CONNECTION), False),
        (NEW_CONNECTION, False),
        (urllib3.exceptions.ConnectTimeoutError("timed out"), False),
        (urllib3.exceptions.NameResolutionError("x", None, socket.gaierror()), False),  # type: ignore[arg-type]
        # the server declined it, or refused it
        (_http_error(429), False),
        (_http_error(408), False),
        (HTTPStatusError(409), False),
        (HTTPStatusError(422), False),
        # it says so
        (cairn.NotApplied("quota exhausted"), False),
        (cairn.not_applied(TimeoutError("timed out in the client's own queue")), False),
        (_raised_from(cairn.TransientError("down"), ConnectionRefusedError()), False),
        # sent, and no answer says what became of it: unknown
        (TimeoutError("timed out"), True),
        (ConnectionResetError(104, "reset by peer"), True),
        (http.client.RemoteDisconnected("closed without response"), True),
        (ReadTimeout(), True),
        (httpx.ReadTimeout("read timed out"), True),
        (httpx.WriteTimeout("write timed out"), True),
        (RemoteProtocolError("peer closed connection"), True),
        (requests.ReadTimeout("read timed out"), True),
        (requests.ConnectionError(DISCONNECTED), True),
        (DISCONNECTED, True),  # permanent by its class, and still unknown
        (urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"), True),  # type: ignore[arg-type]
        (_http_error(500), True),  # a 500 may have applied
        (_http_error(502), True),
        (HTTPStatusError(503), True),
        (_raised_from(cairn.TransientError("HTTP 500"), _http_error(500)), True),
        (cairn.TransientError("try again"), True),  # says nothing: it is transient
        # an earlier, unrelated failure does not speak for this one
        (_raised_during(ReadTimeout(), ConnectionRefusedError()), True),
        # permanent or business, and nothing says it was sent: it did not take effect
        (cairn.PermanentError("no such customer"), False),
        (cairn.BusinessError("card declined"), False),
        (ValueError("amount must be positive"), False),
        (_raised_from(cairn.BusinessError("declined"), HTTPStatusError(402)), False),
    ],
)
def test_whether_a_failed_call_may_have_taken_effect(error: BaseException, applied: bool) -> None:
    assert may_have_applied(error) is applied


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


def test_a_servers_retry_after_is_the_retrys_delay_not_the_backoff() -> None:
    """A 429 with ``Retry-After: 2`` (a TransientError with retry_after_s): the retry is
    due 2 s later, though the default backoff would be under 1 s; the event keeps it."""
    driver = Driver(one_call().build())
    driver.start()
    driver.fail("call", ErrorClass.TRANSIENT, "HTTP 429", retry_after_s=2.0)
    assert driver.timers["retry:call:1:1"] - driver.at == pytest.approx(2.0)
    failed = NodeFailed(at=1.0, node="call", error_class=ErrorClass.TRANSIENT, retry_after_s=2.0)
    assert event_from_dict(event_to_dict(failed)) == failed
    assert "retry_after_s" not in event_to_dict(replace(failed, retry_after_s=None))  # old logs


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
