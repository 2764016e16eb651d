"""Handlers that call a counting HTTP service directly — httpx (sync and async),
requests, urllib — with no ctx.effect and no ctx.model: what ``record: http`` records."""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

import httpx
import requests


def _url(path: str) -> str:
    return os.environ["TOOLS_URL"] + path + os.environ.get("TOOLS_QUERY", "")


def three_libraries(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    with httpx.Client() as client:
        first = client.get(_url("/weather")).json()
    second = requests.post(_url("/search"), json={"q": state.get("q", "cairns")}, timeout=10)
    with urllib.request.urlopen(_url("/time"), timeout=10) as response:
        third = json.loads(response.read())
    return {"weather": first, "search": second.json(), "time": third}


async def async_fetch(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        got = (await client.get(_url("/news"))).json()
    return {"news": got}


def post_chat(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Post to a chat service with requests — no ``record: http``, no ``ctx.effect``:
    what a replay must never send again. A failure to post is logged, not raised."""
    try:
        answer = requests.post(_url("/chat"), json={"text": state.get("text", "hi")}, timeout=10)
    except Exception as exc:  # a handler that swallows what goes wrong
        ctx.log.warning("could not post: %s", exc)
        return {"posted": None}
    return {"posted": answer.json()["n"]}


def posted(state: dict[str, Any]) -> bool:
    """A bisect predicate: good while nothing was posted."""
    return "posted" not in state.get("vars", state)
