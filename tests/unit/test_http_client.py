"""The HTTP client without a server: SSE parsing, the retry policy, error mapping, paging
and a stream's position, against httpx's mock transport (a dropped stream resumed, after
its reconnect delay: tests/embedded/test_http_client.py; the real API: the integration
tests in tests/integration/test_http_client.py)."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import tenacity

from cairn.errors import CairnError, IllegalTransition, NotWaiting, RunNotFound
from cairn.http import ApiError, Client, RetryPolicy
from cairn.http.retries import RetryableAnswer
from cairn.http.sse import RunStream, SSEDecoder

# No wait between tries: these tests are about what is tried again, not when (the waits:
# test_retry_after_is_waited_for_and_backoff_grows_otherwise).
FAST = RetryPolicy(attempts=4, backoff_s=0.0, max_backoff_s=0.0)
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler, retry: RetryPolicy = FAST) -> Client:
    return Client(
        "http://cairn.test",
        "key-0123456789abcdef",
        retry=retry,
        transport=httpx.MockTransport(handler),
    )


def error(status: int, code: str, message: str = "no", **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": message}}
    return httpx.Response(status, json=body, headers=headers)


SUBMITTED = {"run_id": "r1", "status_url": "/v1/runs/r1"}


# -- SSE ---------------------------------------------------------------------------------


def decode(text: str) -> list[tuple[str, str, str | None]]:
    decoder = SSEDecoder()
    found = []
    for line in text.splitlines():
        event = decoder.feed(line)
        if event is not None:
            found.append((event.event, event.data, event.id))
    return found


def test_sse_fields_comments_and_multiline_data() -> None:
    text = (
        "retry: 1000\n\n"  # a retry alone dispatches nothing
        ": keepalive\n\n"
        'id: 3\nevent: signal_received\ndata: {"seq": 3}\n\n'
        "data:first\ndata: second\n\n"  # no event name: "message"; no id: the last one stays
        "event: progress\ndata:  two spaces\nunknown: x\n\n"
        "id: 4:1764-0\nevent: chunk\ndata\n\n"  # "data" with no colon: an empty data line
        "event: dangling\ndata: never dispatched"  # no blank line after it
    )
    assert decode(text) == [
        ("signal_received", '{"seq": 3}', "3"),
        ("message", "first\nsecond", "3"),
        ("progress", " two spaces", "3"),
        ("chunk", "", "4:1764-0"),
    ]


def test_sse_ignores_an_id_with_nul_and_a_malformed_retry() -> None:
    decoder = SSEDecoder()
    for line in ["id: 5", "retry: soon", "", "id: 6\0", "data: x", ""]:
        decoder.feed(line)
    assert decoder.last_id == "5"
    assert decoder.retry_ms is None


def test_a_stream_position_resumes_after_the_last_event_with_an_id() -> None:
    position = RunStream("r1", after=2)
    assert position.params() == {"after": 2}
    assert "Last-Event-ID" not in position.headers()
    for line in [
        "id: 3",
        "event: node_succeeded",
        'data: {"seq": 3}',
        "",
        "event: progress",
        'data: {"seq": 3, "running": {}}',
        "",
    ]:
        position.feed(line)
    assert position.headers()["Last-Event-ID"] == "3"  # progress carries no id
    assert not position.ended
    assert position.dropped(None) == pytest.approx(1.0)
    assert position.dropped(None) == pytest.approx(2.0)  # backs off while nothing comes
    position.feed('data: {"status": "succeeded", "last_seq": 3}')
    assert position.feed("event: end") is None
    end = position.feed("")
    assert end is not None and end.type == "end" and position.ended
    assert position.drops == 0  # an event resets the count


def test_a_stream_that_keeps_dropping_gives_up() -> None:
    position = RunStream("r1", max_drops=2)
    position.dropped(None)
    position.dropped(None)
    with pytest.raises(ApiError) as raised:
        position.dropped(httpx.ReadError("reset"))
    assert raised.value.code == "unreachable"


# -- errors ------------------------------------------------------------------------------


def test_error_codes_map_to_cairns_error_types() -> None:
    answers = iter(
        [
            error(404, "run_not_found", "no run r9"),
            error(409, "not_waiting"),
            error(409, "illegal_transition"),
            error(401, "unauthorized"),
            error(418, "teapot"),
        ]
    )
    with client(lambda _request: next(answers)) as api:
        with pytest.raises(RunNotFound) as missing:
            api.get_run("r9")
        assert isinstance(missing.value, ApiError)
        assert (missing.value.status, missing.value.code) == (404, "run_not_found")
        assert str(missing.value) == "no run r9"
        with pytest.raises(NotWaiting):
            api.signal("r9", "approve")
        with pytest.raises(IllegalTransition):  # its engine-side constructor is not used
            api.cancel("r9")
        with pytest.raises(ApiError) as refused:
            api.get_run("r9")
        assert type(refused.value) is ApiError and refused.value.code == "unauthorized"
        with pytest.raises(ApiError) as unknown:  # a code this client does not know
            api.get_run("r9")
        assert (unknown.value.status, unknown.value.code) == (418, "teapot")


def test_an_api_error_survives_pickling_with_its_type() -> None:
    api = client(lambda _request: error(404, "run_not_found", "no run r9"))
    with api, pytest.raises(RunNotFound) as raised:
        api.get_run("r9")
    copy = pickle.loads(pickle.dumps(raised.value))
    assert isinstance(copy, RunNotFound) and isinstance(copy, CairnError)
    assert (copy.status, copy.code, str(copy)) == (404, "run_not_found", "no run r9")


def test_a_validation_error_names_its_fields() -> None:
    fields = [{"field": "body.imput", "message": "Extra inputs are not permitted"}]
    body = {"error": {"code": "validation_error", "message": "body.imput: ...", "fields": fields}}
    api = client(lambda _request: httpx.Response(422, json=body))
    with api, pytest.raises(ApiError) as raised:
        api.submit("wf", {"x": 1})
    assert raised.value.fields == fields


# -- retries -----------------------------------------------------------------------------


def test_submit_is_retried_with_one_request_id_through_lost_answers() -> None:
    keys: list[str] = []
    answers: list[Any] = [
        httpx.ConnectError("refused"),
        httpx.Response(503),
        httpx.RemoteProtocolError("server disconnected"),
        httpx.Response(202, json=SUBMITTED),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["Idempotency-Key"])
        assert json.loads(request.content) == {"workflow": "wf", "input": {"a": 1}, "priority": 2}
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with client(handler) as api:
        submitted = api.submit("wf", {"a": 1}, priority=2)
    assert submitted.run_id == "r1"
    assert len(keys) == 4 and len(set(keys)) == 1  # one id, made up once, sent every time
    assert keys[0].startswith("cairn-http-")


def test_a_given_request_id_is_the_idempotency_key_and_debounce_sends_none() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json=SUBMITTED)

    with client(handler) as api:
        api.submit("wf", request_id="order-42")
        api.submit("wf", debounce={"key": "k", "wait": "30s"})
    assert seen[0].headers["Idempotency-Key"] == "order-42"
    assert "Idempotency-Key" not in seen[1].headers  # the API refuses a key with debounce
    assert json.loads(seen[1].content)["debounce"] == {"key": "k", "wait": "30s"}
    assert seen[0].headers["Authorization"] == "Bearer key-0123456789abcdef"


def test_a_batch_and_a_signal_get_ids_that_make_them_safe_to_retry() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) in (1, 3):
            return httpx.Response(502, text="<html>bad gateway</html>")
        if request.url.path.endswith(":batch"):
            return httpx.Response(
                200, json={"created": 2, "existing": 0, "refused": 0, "results": []}
            )
        return httpx.Response(200, json={"run_id": "r1", "applied": False, "status": "running"})

    with client(handler) as api:
        api.submit_batch([{"workflow": "wf"}, {"workflow": "wf", "request_id": "mine"}])
        assert api.signal("r1", "approve", {"ok": True}).applied is False
    first, again, signal, signal_again = bodies
    assert first == again
    assert first["runs"][1]["request_id"] == "mine"
    assert first["runs"][0]["request_id"].startswith("cairn-http-")
    assert signal == signal_again and signal["signal_id"].startswith("cairn-http-")


def test_refusals_are_not_retried_and_the_last_retryable_answer_is_raised() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path == "/v1/runs/gone":
            return error(404, "run_not_found")
        return error(503, "unavailable", "the database cannot be reached; try again")

    with client(handler) as api:
        with pytest.raises(RunNotFound):
            api.get_run("gone")
        assert len(calls) == 1
        with pytest.raises(ApiError) as raised:
            api.get_run("busy")
    assert len(calls) == 1 + FAST.attempts
    assert (raised.value.status, raised.value.code) == (503, "unavailable")


def test_a_connection_that_never_comes_raises_unreachable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with client(handler) as api, pytest.raises(ApiError) as raised:
        api.get_run("r1")
    assert (raised.value.status, raised.value.code) == (None, "unreachable")
    assert isinstance(raised.value.__cause__, httpx.ConnectError)


def retry_state(exc: BaseException, attempt: int = 1) -> tenacity.RetryCallState:
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    state.attempt_number = attempt
    state.set_exception((type(exc), exc, None))
    return state


def test_retry_after_is_waited_for_and_backoff_grows_otherwise() -> None:
    policy = RetryPolicy(attempts=6, backoff_s=0.5, max_backoff_s=4.0, max_retry_after_s=60)
    options = policy.options()
    wait, stop = options["wait"], options["stop"]
    asked = RetryableAnswer(httpx.Response(429, headers={"Retry-After": "7"}))
    assert wait(retry_state(asked)) == 7.0
    assert not stop(retry_state(asked))
    too_long = RetryableAnswer(httpx.Response(503, headers={"Retry-After": "120"}))
    assert stop(retry_state(too_long))  # not worth waiting for: give up now
    dated = RetryableAnswer(
        httpx.Response(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    )
    assert wait(retry_state(dated)) == 0.0  # a date in the past: at once
    dropped = httpx.ReadTimeout("slow")
    waits = [wait(retry_state(dropped, attempt)) for attempt in (1, 2, 3, 6)]
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 1.5 and 2.0 <= waits[2] <= 2.5
    assert waits[3] <= 4.0
    assert stop(retry_state(dropped, 6)) and not stop(retry_state(dropped, 5))


# -- paging and streams ------------------------------------------------------------------


def run(run_id: str) -> dict[str, Any]:
    return {
        "id": run_id,
        "workflow": "wf",
        "version": 1,
        "status": "succeeded",
        "request_id": None,
        "current": [],
        "reason": None,
        "last_seq": 3,
        "created_at": 1.0,
        "updated_at": 2.0,
    }


def test_list_runs_follows_the_cursor() -> None:
    pages = {None: (["a", "b"], "c1"), "c1": (["c", "d"], "c2"), "c2": (["e"], None)}

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["workflow"] == "wf" and request.url.params["limit"] == "2"
        ids, cursor = pages[request.url.params.get("cursor")]
        return httpx.Response(200, json={"runs": [run(i) for i in ids], "next_cursor": cursor})

    with client(handler) as api:
        assert [r.id for r in api.list_runs(workflow="wf", page_size=2)] == list("abcde")


def test_no_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_API_URL", raising=False)
    with pytest.raises(CairnError, match="CAIRN_API_URL"):
        Client()
    monkeypatch.setenv("CAIRN_API_URL", "http://from-env.test")
    monkeypatch.setenv("CAIRN_API_KEY", "env-key-0123456789")
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"run_id": "r1", "changed": True, "status": "cancelling"})

    with Client(transport=httpx.MockTransport(handler)) as api:
        api.cancel("r1", "no longer needed")
    assert str(seen[0].url) == "http://from-env.test/v1/runs/r1/cancel"
    assert seen[0].headers["Authorization"] == "Bearer env-key-0123456789"
    assert json.loads(seen[0].content) == {"reason": "no longer needed"}
