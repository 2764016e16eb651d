"""cairn over HTTP, for services that start and follow runs without cairn's database
and broker credentials: an API key (``CAIRN_API_KEY``) and the API's address
(``CAIRN_API_URL``) are all they need.

    from cairn.http import Client

    with Client() as cairn:
        run = cairn.submit("book_flight", {"origin": "BER"}, request_id="order-42")
        for event in cairn.stream(run.run_id):
            print(event.type, event.data)

:class:`AsyncClient` is the same, awaited. Results are the API's own response models
(:mod:`cairn.http.models`); refusals raise :class:`ApiError` — also the matching
:mod:`cairn.errors` type where there is one (``RunNotFound``, ``NotWaiting``, ...).
This package imports neither the engine nor a database driver nor a web framework.
See docs/api.md.
"""

from cairn.http.client import AsyncClient, Client
from cairn.http.errors import ApiError
from cairn.http.models import (
    BatchResponse,
    BatchResult,
    CancelResult,
    EventPage,
    Progress,
    RunDetail,
    RunPage,
    RunSummary,
    SignalResult,
    Submitted,
)
from cairn.http.retries import RetryPolicy
from cairn.http.sse import StreamEvent

__all__ = [
    # clients
    "AsyncClient",
    "Client",
    "RetryPolicy",
    # results
    "BatchResponse",
    "BatchResult",
    "CancelResult",
    "EventPage",
    "Progress",
    "RunDetail",
    "RunPage",
    "RunSummary",
    "SignalResult",
    "StreamEvent",
    "Submitted",
    # errors
    "ApiError",
]
