"""Handlers for the integration workflows. They keep their own ledger — a file the test
reads — so that "executed exactly once" is counted by the handler, not by cairn."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from cairn import BusinessError, DeadlineExceeded, PermanentError, TransientError


def _record(ctx: Any, state: dict[str, Any], what: str) -> None:
    path = state.get("ledger")
    if not path:
        return
    line = f"{ctx.run_id} {ctx.node} {ctx.iteration} {ctx.attempt} {what} {os.getpid()}\n"
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(line)
        ledger.flush()
        os.fsync(ledger.fileno())


def _runs_before(ctx: Any, state: dict[str, Any]) -> int:
    path = state.get("ledger")
    if not path or not os.path.exists(path):
        return 0
    prefix = f"{ctx.run_id} {ctx.node} {ctx.iteration} "
    with open(path, encoding="utf-8") as ledger:
        return sum(line.startswith(prefix) for line in ledger)


def _start_and_dawdle(ctx: Any, state: dict[str, Any]) -> None:
    """Record the execution's start; on the node's first execution only, spend
    ``state["slow"][node]`` seconds."""
    first = _runs_before(ctx, state) == 0
    _record(ctx, state, "start")
    delay = float((state.get("slow") or {}).get(ctx.node, 0)) if first else 0.0
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        time.sleep(0.05)


def step(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One step of a chain: record the execution, maybe dawdle, return a marker.

    ``state["slow"][node]`` seconds are spent on the node's first execution only, so a
    test can kill a worker mid-node and see the re-execution finish promptly.
    """
    _start_and_dawdle(ctx, state)
    ctx.messages.append({"role": "tool", "content": f"{ctx.node} done"})
    return {ctx.node: ctx.iteration, "last": ctx.node}


def branch(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A fan-out's branch that changes nothing but its own output (so its success may
    merge onto its run): record the execution, maybe dawdle as :func:`step` does."""
    _start_and_dawdle(ctx, state)
    return {ctx.node: ctx.iteration}


def where(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Records which worker ran the node: the role its test gave the worker process
    (CAIRN_TEST_WORKER_ROLE), so routing is judged by the handler, not by cairn."""
    role = os.environ.get("CAIRN_TEST_WORKER_ROLE", "unknown")
    _record(ctx, state, f"on:{role}")
    return {ctx.node: role}


def is_even(state: dict[str, Any]) -> bool:
    return int(state.get("number", 0)) % 2 == 0


def countdown(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A loop body that asks to stop looping on its second visit."""
    _record(ctx, state, "start")
    return {"kind": "plain" if ctx.iteration >= 2 else "loop", "loops": ctx.iteration}


def paging(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Reads three pages slowly, reporting progress after each (the first execution only)."""
    first = _runs_before(ctx, state) == 0
    _record(ctx, state, "start")
    for page in range(1, 4):
        ctx.progress(page, 3, f"page {page}")
        time.sleep(float(state.get("page_s", 0.5)) if first else 0.0)
    return {"pages": 3}


def die(ctx: Any, state: dict[str, Any]) -> None:
    """A poison node: it kills its own worker process, every time."""
    _record(ctx, state, "start")
    os._exit(1)


def plan_still_valid(ctx: Any, state: dict[str, Any]) -> str | None:
    """The on_resume check: a plan made before an interruption is stale, once."""
    return None if state.get("replanned") else f"{ctx.node} was interrupted; the plan is stale"


def replan(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _record(ctx, state, "start")
    return {"replanned": True, "slow": {}}


def flaky(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Fails transiently until attempt ``succeed_on``; with ``permanent`` set, fails for good."""
    _record(ctx, state, "start")
    if state.get("permanent"):
        raise PermanentError("the account does not exist")
    if ctx.attempt < int(state.get("succeed_on", 1)):
        raise TransientError(f"upstream 503 on attempt {ctx.attempt}")
    return {"called_on_attempt": ctx.attempt}


def fallback(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _record(ctx, state, "start")
    return {"used_fallback": True}


def refuse(ctx: Any, state: dict[str, Any]) -> None:
    """A later step that fails the run for good, after the compensable ones."""
    _record(ctx, state, "start")
    raise BusinessError("the carrier refused the shipment")


def undo(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A compensation: dawdles on its first execution (``slow_undo``), then applies its
    effect — a ledger line ``undo`` — once, at the end."""
    first = not any(
        line.split()[1] == ctx.node and line.split()[4] == "undo-start" for line in _lines(state)
    )
    _record(ctx, state, "undo-start")
    delay = float((state.get("slow_undo") or {}).get(ctx.node, 0)) if first else 0.0
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        time.sleep(0.05)
    _record(ctx, state, "undo")
    return {f"undone_{ctx.node}": True}


def think(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """An agent loop: many short model calls, a safe point between each."""
    _record(ctx, state, "start")
    for turn in range(int(state.get("turns", 200))):
        ctx.raise_if_cancelled()
        ctx.progress(turn, None, "thinking")
        time.sleep(0.05)
    return {"thought": True}


def stubborn(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One long call that cannot be interrupted (it never looks at ctx.cancelled): it
    ends after ``call_s``, or once the file ``release`` names exists (the test is done
    looking at it running, however slowly the machine got there)."""
    _record(ctx, state, "start")
    deadline = time.monotonic() + float(state.get("call_s", 30))
    release = state.get("release")
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(0.05)
    return {"finished_anyway": True}


def deaf(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """As :func:`stubborn`, and deaf to its deadline too: it swallows the
    ``DeadlineExceeded`` a worker raises into it at the timeout (a vendor's blocking call
    that retries), so only its node's timeout timer decides what comes of it."""
    _record(ctx, state, "start")
    deadline = time.monotonic() + float(state.get("call_s", 30))
    release = state.get("release")
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        try:
            time.sleep(0.05)
        except DeadlineExceeded:
            continue
    return {"finished_anyway": True}


def _lines(state: dict[str, Any]) -> list[str]:
    path = state.get("ledger")
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as ledger:
        return ledger.read().splitlines()


def boom(ctx: Any, state: dict[str, Any]) -> None:
    _record(ctx, state, "start")
    raise PermanentError(f"{ctx.node} cannot do it")


def hang(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A branch that takes too long; it stops at a safe point once told to."""
    _record(ctx, state, "start")
    deadline = time.monotonic() + float(state.get("hang_s", 30))
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.05)
    return {ctx.node: "late"}


def spend(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """A model-calling step: ``calls[node]`` calls of ``tokens_per_call`` tokens each,
    ``call_s[node]`` seconds each, each reported with ``ctx.charge`` (which stops it once
    over budget); a safe point between calls."""
    _record(ctx, state, "start")
    calls = int((state.get("calls") or {}).get(ctx.node, 3))
    call_s = float((state.get("call_s") or {}).get(ctx.node, 0.0))
    for _ in range(calls):
        ctx.raise_if_cancelled()
        time.sleep(call_s)
        ctx.charge(tokens=int(state.get("tokens_per_call", 100)))
    return {f"{ctx.node}_tokens": ctx.charges.get("tokens", 0.0)}


def pick(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    step(ctx, state)
    return {"found": "LH 123", "picked_by": ctx.run_id}


def report_part(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One part of a weekly report: expensive, and the same for everyone that week."""
    _record(ctx, state, "start")
    return {ctx.node: f"{ctx.node} of week {state['week']}"}


def report_final(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    _record(ctx, state, "start")
    if state.get("fail_final"):
        raise PermanentError("the report store is read-only today")
    return {"report": " / ".join(state[part] for part in ("sales", "traffic", "costs"))}


def stuck_once(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Blocks for ten minutes on its first attempt, ignoring ``ctx.cancelled`` (a model
    call without a client timeout); later attempts return at once. With ``deaf`` set it
    is deaf to being interrupted too: it blocks SIGALRM and, told to stop anyway, keeps
    sleeping — only replacing its process stops it."""
    _record(ctx, state, "start")
    if ctx.attempt == 1:
        if state.get("deaf"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                time.sleep(deadline - time.monotonic())
            except BaseException:
                if not state.get("deaf"):
                    raise
    _record(ctx, state, "done")
    return {"answered_on_attempt": ctx.attempt}


def post_service(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One request to the service stand-in (``PAYMENTS_URL``) with requests, its error
    status raised as requests raises it (``raise_for_status``): nothing says it is
    transient but the status it carries."""
    import requests  # noqa: PLC0415

    answer = requests.post(f"{os.environ['PAYMENTS_URL']}/charge", timeout=10)
    answer.raise_for_status()
    return {"charged": True, "attempt": ctx.attempt}


def charge_payments(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """One request to the payments stand-in (``PAYMENTS_URL``): its 503 is a transient
    failure (urllib's HTTPError carries the status)."""
    import urllib.request  # noqa: PLC0415

    request = urllib.request.Request(f"{os.environ['PAYMENTS_URL']}/charge", method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return {"charged": answer.status == 200}
