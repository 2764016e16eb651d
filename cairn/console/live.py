"""The run page follows the run live: ``/console/runs/{id}/stream`` is the API's own run
stream (``GET /v1/runs/{id}/stream``, the same function: events, progress, streamed
model text, resuming from ``Last-Event-ID``), signed in by the session cookie — a
browser's EventSource cannot send an ``Authorization`` header."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from cairn.api import stream
from cairn.api.scope import RunId
from cairn.console.web import PREFIX, ConsoleRoute, Who

router = APIRouter(prefix=PREFIX, route_class=ConsoleRoute)
LAST_EVENT_ID = re.compile(r"[0-9]{1,10}(:[0-9]{1,20}-[0-9]{1,10})?")


@router.get("/runs/{run_id}/stream")
async def follow(
    request: Request,
    run_id: RunId,
    who: Who,
    after: Annotated[int | None, Query(ge=0, le=2_147_483_647)] = None,
) -> Response:
    resume = request.headers.get("last-event-id")
    if resume is not None and not LAST_EVENT_ID.fullmatch(resume):
        resume = None
    return await stream.stream_run(
        run_id=run_id, request=request, who=who, after=after, last_event_id=resume
    )
