"""Running a handler: the workflow's on_resume check first (a node running again after an
interruption), then the handler itself, held to its node's timeout — and what it
returned, or how it failed, as the node's outcome.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cairn.errors import CairnError, InvalidInput, StoreUnavailable
from cairn.lease.heartbeat import Beat, Heartbeats
from cairn.model.classify import classify
from cairn.model.definition import ErrorClass, OnResume
from cairn.model.events import (
    NodeCancelled,
    NodeFailed,
    NodeSucceeded,
    PlanInvalidated,
    event_from_dict,
    event_to_dict,
)
from cairn.model.failures import Cancelled, DeadlineExceeded
from cairn.model.handlers import is_async
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.payloads import json_bytes, storable_json
from cairn.model.statuses import NodeStatus
from cairn.observe.sentry import report_failure
from cairn.recording.calls import ModelCalls
from cairn.recording.http import recording
from cairn.workers.aio import Coroutines, EventLoop
from cairn.workers.context import StepContext
from cairn.workers.deadlines import limited

OUTPUT_HINT = " (store large data as an artifact and return its reference)"


class OutputError(CairnError):
    """A handler returned something that cannot be the node's output."""

    code = "bad_output"
    error_class = ErrorClass.PERMANENT.value


def check_output(output: Any, limit_bytes: int, *, hint: str = "") -> dict[str, Any]:
    """A handler's return value as the node's output: a JSON object within the size limit
    (None is no output); otherwise :class:`OutputError`."""
    if output is None:
        return {}
    if not isinstance(output, dict):
        raise OutputError(
            f"a handler returns a dict (merged into the state) or None, not {type(output).__name__}"
        )
    try:
        storable_json(output, what="the handler's output", limit_bytes=limit_bytes)
    except InvalidInput as exc:
        raise OutputError(f"{exc}{hint}" if "limit" in str(exc) else str(exc)) from exc
    return output


def succeeded(
    ctx: StepContext, message: NodeMessage, output: dict[str, Any], duration: float
) -> NodeOutcome:
    event = as_stored(
        NodeSucceeded(
            at=0.0,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            output=output,
            phase=message.phase,
            messages=ctx.added_messages(),
            sessions=ctx.changed_sessions() or None,
            charges=ctx.charges or None,
            artifacts=ctx.added_artifacts() or None,
            timings=ctx.execution_timings(duration),
            patches=dict(ctx.patches) or None,
        )
    )
    return NodeOutcome(event, NodeStatus.SUCCEEDED, result=output, duration_s=duration)


def as_stored(event: NodeSucceeded) -> NodeSucceeded:
    """``event`` as the database keeps it — its JSON read back (a tuple a handler returned
    is a list there, an integer key a string) — so that the state this process decides
    on it, and begins the run's next node on (:meth:`cairn.engine.heads.RunHeads.state_at`),
    is the state any other worker restores from the history."""
    plain = event_to_dict(event)
    gathered = (event.messages, event.sessions, event.charges, event.artifacts, event.patches)
    try:
        # What the context gathered is checked here; the output was (check_output), and
        # the rest is cairn's own: without the former, the fast encoder will do.
        text = json.dumps(plain, allow_nan=False) if any(gathered) else json_bytes(plain)
    except (TypeError, ValueError) as exc:  # its sessions: the output was checked
        raise OutputError(f"the step's sessions are not JSON: {exc}") from exc
    stored = event_from_dict(json.loads(text))
    assert isinstance(stored, NodeSucceeded)
    return stored


@dataclass
class Execution:
    """One handler's run, as :func:`execute` and :func:`execute_awaited` share it: what it
    is held to (its timeout, its cancel), and its outcome however it ends."""

    handler: Callable[..., Any]
    ctx: StepContext
    message: NodeMessage
    check: OnResume | None
    timeout_s: float | None
    heartbeats: Heartbeats
    beat: Beat
    grace_s: float
    give_up: Callable[[], None]
    limit_bytes: int
    http_calls: ModelCalls | None = None
    checker: Callable[..., Any] | None = field(init=False, default=None)
    coroutines: Coroutines | None = field(init=False, default=None)
    started: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.checker = self.check.check.resolve() if self.check is not None else None
        if is_async(self.handler) or (self.checker is not None and is_async(self.checker)):
            coroutines = self.coroutines = Coroutines()
            stop = Cancelled(
                f"run {self.ctx.run_id} no longer needs {self.message.key}: stopped at its await"
            )
            self.beat.on_cancel = partial(coroutines.cancel, stop)
            if self.beat.cancelled.is_set():  # found before the hook was in place
                coroutines.cancel(stop)
        self.started = time.perf_counter()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Held to the node's timeout, its HTTP recorded if it says so."""
        message = self.message
        try:
            with (
                limited(
                    self.heartbeats,
                    self.beat,
                    self.timeout_s,
                    self.grace_s,
                    what=f"{message.key} attempt {message.attempt}",
                    give_up=self.give_up,
                    coroutines=self.coroutines,
                ),
                recording(self.http_calls),
            ):
                yield
        finally:
            self.beat.on_cancel = None

    def invalidated(self, verdict: Any) -> NodeOutcome | None:
        """The on_resume check's verdict: None if the plan still holds."""
        if not (verdict is False or isinstance(verdict, str)):
            return None
        assert self.check is not None
        reason = verdict or f"{self.check.check.path} found the plan no longer holds"
        self.ctx.log.warning("plan no longer valid on resume: %s", reason)
        message = self.message
        invalidated = PlanInvalidated(
            at=0.0,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            reason=reason,
        )
        return NodeOutcome(invalidated, NodeStatus.CANCELLED, error=reason)

    def returned(self, output: Any) -> NodeOutcome:
        checked = check_output(output, self.limit_bytes, hint=OUTPUT_HINT)
        return succeeded(self.ctx, self.message, checked, time.perf_counter() - self.started)

    def ended_by(self, exc: BaseException) -> NodeOutcome:
        """The outcome of a handler that raised ``exc`` — or ``exc`` raised again: cairn's
        own outage (the message is given back), or what is not the handler's to raise."""
        if isinstance(exc, StoreUnavailable) or not isinstance(exc, DeadlineExceeded | Exception):
            raise exc
        ctx, message = self.ctx, self.message
        duration = time.perf_counter() - self.started
        if isinstance(exc, Cancelled):
            ctx.log.info("stopped at a safe point: the run is being cancelled")
            cancelled = NodeCancelled(
                at=0.0,
                node=message.node,
                iteration=message.iteration,
                attempt=message.attempt,
                phase=message.phase,
                charges=ctx.charges or None,
            )
            return NodeOutcome(cancelled, NodeStatus.CANCELLED, duration_s=duration)
        error_class = classify(exc)  # a deadline: transient, "timed out"
        report_failure(exc, error_class)
        text = f"{type(exc).__name__}: {exc}"
        ctx.log.warning("handler failed (%s): %s", error_class.value, text)
        failed = NodeFailed(
            at=0.0,
            node=message.node,
            iteration=message.iteration,
            attempt=message.attempt,
            error_class=error_class,
            message=text,
            phase=message.phase,
            charges=ctx.charges or None,
            timings=ctx.execution_timings(duration),
            retry_after_s=getattr(exc, "retry_after_s", None),
            patches=dict(ctx.patches) or None,
        )
        return NodeOutcome(
            failed,
            NodeStatus.FAILED,
            error_class=error_class.value,
            error="".join(traceback.format_exception(exc, limit=20)),
            duration_s=duration,
        )


def execute(
    handler: Callable[..., Any], ctx: StepContext, message: NodeMessage, **how: Any
) -> NodeOutcome:
    """Run the handler — after the workflow's on_resume ``check``, if there is one —
    held to ``timeout_s`` (``give_up``: past it and ``grace_s``, let the claim go); the
    calling thread waits for it (an async one, on the process's loop). ``how``: the
    rest of :class:`Execution`."""
    run = Execution(handler, ctx, message, **how)
    try:
        with run.held():
            if run.checker is not None:
                invalid = run.invalidated(call_handler(run.checker, ctx, run.coroutines))
                if invalid is not None:
                    return invalid
            return run.returned(call_handler(handler, ctx, run.coroutines))
    except BaseException as exc:
        return run.ended_by(exc)


async def execute_awaited(
    handler: Callable[..., Any], ctx: StepContext, message: NodeMessage, **how: Any
) -> NodeOutcome:
    """:func:`execute` for an async handler, from a coroutine on the process's loop: the
    handler is awaited there, and no thread waits for it."""
    run = Execution(handler, ctx, message, **how)
    assert run.coroutines is not None, "execute_awaited runs async handlers"
    try:
        with run.held():
            if run.checker is not None:
                verdict = await _awaited(run.checker, ctx, run.coroutines)
                invalid = run.invalidated(verdict)
                if invalid is not None:
                    return invalid
            return run.returned(await _awaited(handler, ctx, run.coroutines))
    except BaseException as exc:
        return run.ended_by(exc)


async def _awaited(fn: Callable[..., Any], ctx: StepContext, coroutines: Coroutines) -> Any:
    if is_async(fn):
        produced = fn(ctx, ctx.handler_state())
    else:  # a plain on_resume check beside an async handler: off the loop
        produced = await asyncio.to_thread(fn, ctx, ctx.handler_state())
    if not inspect.isawaitable(produced):
        return produced
    return await coroutines.run_here(produced)


def call_handler(fn: Callable[..., Any], ctx: StepContext, coroutines: Coroutines | None) -> Any:
    """What ``fn(ctx, state)`` returned — awaited on this process's event loop if it is
    awaitable (cancellable through ``coroutines``)."""
    produced = fn(ctx, ctx.handler_state())
    if not inspect.isawaitable(produced):
        return produced
    if coroutines is None:  # a plain function that returned an awaitable
        return EventLoop.of_process().run(produced)
    return coroutines.run(produced)
