"""Handlers and adapters for the effects tests: a charge and an email through the test
service (``EFFECT_SERVICE_URL``), each as a ``ctx.effect`` keyed by the order."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cairn import PermanentError, TransientError
from cairn.effects import Check, Effect, Verdict

TIMEOUT_S = 10.0


def _url() -> str:
    return os.environ["EFFECT_SERVICE_URL"]


def _request(
    method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        _url() + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:  # with an idempotency key, trying again is safe
            raise TransientError(f"{method} {path}: {exc.code}") from exc
        raise PermanentError(f"{method} {path}: {exc.code}") from exc


def charge(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    order = state["order"]

    def call(key: str) -> Any:
        body = {"order": order, "amount": state.get("amount", 100)}
        return _request("POST", "/charges", body, ctx.idempotency_headers(key))

    result = ctx.effect(
        "payments.charge", f"{order}:charge", call, policy=state.get("policy", "flag")
    )
    return {"charge_id": result["id"]}


def gated_charge(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``charge``, once the file ``state["gate"]`` exists; ``<gate>.waiting`` says it is
    waiting there (the test changes the world meanwhile)."""
    gate = Path(state["gate"])
    gate.with_name(gate.name + ".waiting").write_text(f"{ctx.attempt}\n")
    deadline = time.monotonic() + 30
    while not gate.exists():
        if time.monotonic() > deadline:
            raise PermanentError(f"the gate {gate} never opened")
        time.sleep(0.05)
    return charge(ctx, state)


def paused_charge(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``charge`` after a pause: ``first_pause_s`` on the node's first execution (the
    test stops its worker meanwhile), ``pause_s`` on any later one. The pause ends by the
    clock, so a worker resumed after it goes straight on to the call."""
    started = Path(state["ledger"])
    first = not started.exists() or f"{ctx.run_id} {ctx.node} " not in started.read_text()
    with started.open("a") as ledger:
        ledger.write(f"{ctx.run_id} {ctx.node} {ctx.iteration} {ctx.attempt} start {os.getpid()}\n")
    deadline = time.monotonic() + float(state["first_pause_s" if first else "pause_s"])
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return charge(ctx, state)


def email(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    order = state["order"]

    def call(key: str) -> Any:
        body = {"order": order, "to": "customer@example.com"}
        return _request("POST", "/emails", body, ctx.idempotency_headers(key))

    result = ctx.effect("mail.send", f"{order}:receipt", call)
    return {"email_id": result["id"]}


class _Resource:
    """An adapter: the test service, asked by the effect's key."""

    kind = ""

    def check(self, effect: Effect) -> Check:
        try:
            record = _request("GET", f"/{self.kind}/{effect.key}")
        except PermanentError:  # 404
            return Check(Verdict.ABSENT)
        except (TransientError, OSError) as exc:
            return Check(Verdict.UNKNOWN, detail=str(exc))
        return Check(Verdict.APPLIED, record)

    def apply(self, effect: Effect) -> Any:
        body = {"order": effect.key.split(":")[0], "reapplied": True}
        return _request("POST", f"/{self.kind}", body, {"Idempotency-Key": effect.key})


class Charges(_Resource):
    kind = "charges"


class Emails(_Resource):
    kind = "emails"
