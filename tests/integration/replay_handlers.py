"""Handlers for the replay and fork tests: a shop order of five effects (reserve,
charge, invoice, ship, notify), each a ``ctx.effect`` keyed by the order. The outside
world is the test HTTP service (``EFFECT_SERVICE_URL``), or — on the embedded store —
a JSON-lines file (``state["world"]``) that counts every call.

Two module attributes change what a handler does, as a code change would: ``TAX_RATE``
(the invoice's total) and ``AUDIT`` (``notify`` also writes an ``audit.log`` effect).
A test changes them in its own process only: the workers keep the defaults."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from tests.integration.effect_handlers import _request

TAX_RATE = 0.1
AUDIT = False

_world_lock = threading.Lock()


def _call(ctx: Any, state: dict[str, Any], kind: str, body: dict[str, Any]) -> Any:
    def call(key: str) -> Any:
        world = state.get("world")
        if world:
            with _world_lock, open(world, "a", encoding="utf-8") as calls:
                calls.write(json.dumps({"kind": kind, "key": key, "run_id": ctx.run_id}) + "\n")
            return {"id": f"{kind}:{key}", "key": key, **body}
        return _request("POST", f"/{kind}", body, ctx.idempotency_headers(key))

    return call


def world_calls(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as calls:
        return [json.loads(line) for line in calls]


def step(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """reserve, charge, ship: an effect named after the node."""
    order, kind = state["order"], ctx.node
    body = {"order": order, "amount": state.get("amount", 100)}
    result = ctx.effect(f"shop.{kind}", f"{order}:{kind}", _call(ctx, state, kind, body))
    return {f"{kind}_id": result["id"]}


def invoice(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    order = state["order"]
    total = round(float(state.get("amount", 100)) * (1 + TAX_RATE), 2)
    ref = ctx.artifacts.put("invoice", f"invoice {order}: {total:.2f}", tool="invoicer")
    body = {"order": order, "total": total}
    result = ctx.effect("shop.invoice", f"{order}:invoice", _call(ctx, state, "invoice", body))
    return {"invoice_id": result["id"], "total": total, "invoice_sha": ref["sha256"]}


def notify(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    order = state["order"]
    ctx.progress(1, 1, "notified")
    body = {"order": order, "to": "customer@example.com"}
    result = ctx.effect("shop.notify", f"{order}:notify", _call(ctx, state, "notify", body))
    if AUDIT:
        ctx.effect("audit.log", f"{order}:audit", _call(ctx, state, "audit", {"order": order}))
    return {"notified": result["id"]}


def fake_audit(request: Any) -> dict[str, Any]:
    """A replay stub for ``audit.log``: registered by the tests that want one."""
    return {"id": f"fake-{request.key}", "stub": True}
