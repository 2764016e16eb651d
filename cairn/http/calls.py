"""Every request the clients make, written once: what to send and how to read the
answer. :class:`~cairn.http.client.Client` and :class:`~cairn.http.client.AsyncClient`
only carry these over the wire, one blocking and one awaiting.

Each function here is also a client method (the clients bind them), so its signature
and docstring are the method's.
"""

from __future__ import annotations

import os
import ssl
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

import cairn
from cairn.errors import ConfigError
from cairn.http.models import (
    BatchResponse,
    CancelResult,
    EventPage,
    RunDetail,
    RunPage,
    SignalResult,
    Submitted,
)
from cairn.http.sse import RunStream

T = TypeVar("T")

URL_VARIABLE = "CAIRN_API_URL"
KEY_VARIABLE = "CAIRN_API_KEY"
EVENTS_PAGE = 1000  # the API's largest page of events
STREAM_READ_S = 60.0


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request, and how to read its successful answer's JSON."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def request(
        self, http: httpx.Client | httpx.AsyncClient, *, streamed: bool = False
    ) -> httpx.Request:
        # Built once, sent as often as the tries need: a retry sends the same request
        # id, so the API answers it with the run the first try made.
        request = http.build_request(
            self.method, self.path, params=self.params, json=self.body, headers=self.headers
        )
        if streamed:  # quiet between events: the API sends a comment every 15 s
            request.extensions["timeout"] = {**http.timeout.as_dict(), "read": STREAM_READ_S}
        return request


class ApiKey(httpx.Auth):
    """How a request says who sends it: the API key as a bearer token. The one place
    the clients handle credentials."""

    def __init__(self, key: str) -> None:
        self._header = f"Bearer {key}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request


def connection(base_url: str | None, api_key: str | None, timeout_s: float) -> dict[str, Any]:
    """The httpx client's options: the base URL and key given, else ``CAIRN_API_URL``
    and ``CAIRN_API_KEY``."""
    url = base_url or os.environ.get(URL_VARIABLE)
    if not url:
        raise ConfigError(f"no API to talk to: give base_url, or set {URL_VARIABLE}")
    key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
    return {
        "base_url": url,
        "auth": ApiKey(key) if key else None,
        "timeout": timeout_s,
        "headers": {"User-Agent": f"cairn-http/{cairn.__version__}"},
        **({} if url.lower().startswith("https:") else {"verify": _no_tls()}),
    }


def _no_tls() -> ssl.SSLContext:
    """The TLS settings of a client of a plain ``http://`` API: none are used, so the CA
    bundle is not loaded (a tenth of a second at each command line's start). Should a
    request still meet TLS, this context trusts no certificate, and it fails."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


# -- the calls ------------------------------------------------------------------------


def submit(
    workflow: str,
    run_input: Mapping[str, Any] | None = None,
    *,
    request_id: str | None = None,
    version: int | None = None,
    webhook: str | None = None,
    debounce: Mapping[str, Any] | None = None,
    singleton: Mapping[str, Any] | None = None,
    priority: int | None = None,
) -> Call[Submitted]:
    """Start a run of ``workflow``; answer its id at once. The same ``request_id``
    returns the same run (one is made up when none is given, so that a retried submit
    never starts two). ``debounce`` (``{"key", "wait", "max_wait"?}``) collapses rapid
    submissions with one key into one run — it takes no request id, its key is the
    idempotency; ``singleton`` (``{"key", "mode": "skip"|"cancel"}``) keeps one
    unfinished run per key; ``priority`` -5..5, higher first. See docs/api.md."""
    body = present(
        workflow=workflow,
        input=dict(run_input or {}),
        version=version,
        webhook=webhook,
        debounce=debounce,
        singleton=singleton,
        priority=priority,
    )
    # A debounced submit takes no key (the API refuses one): its debounce key collapses
    # the tries. A request id given with it is sent all the same, for the API to refuse.
    key = request_id or (None if debounce is not None else _made_up_id())
    headers = {"Idempotency-Key": key} if key is not None else {}
    return Call("POST", "/v1/runs", Submitted.model_validate, body=body, headers=headers)


def submit_batch(runs: Sequence[Mapping[str, Any]]) -> Call[BatchResponse]:
    """Start up to 1,000 runs in one transaction (``{"workflow", "input"?, "version"?,
    "request_id"?, "webhook"?, "priority"?}`` each); each item is answered on its own.
    An item without a ``request_id`` is given one, so a retried batch starts none twice."""
    items = [{**item, "request_id": item.get("request_id") or _made_up_id()} for item in runs]
    return Call("POST", "/v1/runs:batch", BatchResponse.model_validate, body={"runs": items})


def get_run(run_id: str) -> Call[RunDetail]:
    """The run: status, nodes, progress, heartbeats, state, what it waits for."""
    return Call("GET", run_path(run_id), RunDetail.model_validate)


def runs_page(
    *,
    status: str | Sequence[str] | None = None,
    workflow: str | None = None,
    version: int | None = None,
    created_after: float | None = None,
    created_before: float | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Call[RunPage]:
    """One page of the namespace's runs the filters select, newest first: ``status`` one
    or several, ``created_after``/``created_before`` epoch seconds (exclusive). Pass its
    ``next_cursor`` as ``cursor`` for the next (``runs`` follows them for you)."""
    statuses = [status] if isinstance(status, str) else list(status or []) or None
    params = present(
        status=statuses,
        workflow=workflow,
        version=version,
        created_after=created_after,
        created_before=created_before,
        limit=limit,
        cursor=cursor,
    )
    return Call("GET", "/v1/runs", RunPage.model_validate, params=params)


@dataclass(frozen=True)
class RunFilters:
    """Which runs a listing shows, paged through by the clients' ``runs``."""

    status: str | Sequence[str] | None = None
    workflow: str | None = None
    version: int | None = None
    created_after: float | None = None
    created_before: float | None = None

    def page(self, limit: int, cursor: str | None) -> Call[RunPage]:
        return runs_page(
            status=self.status,
            workflow=self.workflow,
            version=self.version,
            created_after=self.created_after,
            created_before=self.created_before,
            limit=limit,
            cursor=cursor,
        )


def events(run_id: str, after: int = 0, limit: int = EVENTS_PAGE) -> Call[EventPage]:
    """The run's event log after seq ``after``, oldest first, at most ``limit`` events;
    the page's ``next_after`` continues it."""
    params = {"after": after, "limit": limit}
    return Call("GET", f"{run_path(run_id)}/events", EventPage.model_validate, params=params)


def signal(
    run_id: str,
    name: str,
    payload: Mapping[str, Any] | None = None,
    *,
    signal_id: str | None = None,
    node: str | None = None,
    comment: str | None = None,
) -> Call[SignalResult]:
    """Send a signal to a waiting run, as the key's principal (``comment`` kept beside
    it). The same ``signal_id`` is applied once (one is made up when none is given):
    ``applied`` is False when it had been applied before — by an earlier call, or by
    this one's first try if its answer was lost. A signal the run cannot take raises
    (``NotWaiting``, ``UnknownSignal``, ...); one the key may not give, ``Forbidden``."""
    body = present(
        payload=payload, signal_id=signal_id or _made_up_id(), node=node, comment=comment
    )
    path = f"{run_path(run_id)}/signals/{quote(name, safe='')}"
    return Call("POST", path, SignalResult.model_validate, body=body)


def cancel(run_id: str, reason: str | None = None) -> Call[CancelResult]:
    """Cancel a run: ``cancelling`` at once, ``cancelled`` once its running nodes have
    stopped; ``changed`` is False if it was being cancelled already. A finished run
    raises ``IllegalTransition``."""
    body = present(reason=reason)
    return Call("POST", f"{run_path(run_id)}/cancel", CancelResult.model_validate, body=body)


def stream_call(position: RunStream) -> Call[None]:
    """Open (or reopen, after the last event seen) a run's event stream."""
    path = f"{run_path(position.run_id)}/stream"
    return Call("GET", path, _nothing, params=position.params(), headers=position.headers())


def run_path(run_id: str) -> str:
    return f"/v1/runs/{quote(run_id, safe='')}"


def present(**values: Any) -> dict[str, Any]:
    """The fields given: the API's defaults stand for the rest."""
    return {name: value for name, value in values.items() if value is not None}


def _made_up_id() -> str:
    return f"cairn-http-{uuid.uuid4()}"


def _nothing(_body: Any) -> None:
    return None
