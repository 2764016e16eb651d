"""Running a handler: the workflow's on_resume check first (a node running again after an
interruption), then the handler itself, held to its node's timeout — and what it
returned, or how it failed, as the node's outcome.
"""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from cairn.errors import CairnError, InvalidInput, StoreUnavailable
from cairn.lease.heartbeat import Beat, Heartbeats
from cairn.model.classify import classify
from cairn.model.definition import ErrorClass, OnResume
from cairn.model.events import NodeCancelled, NodeFailed, NodeSucceeded, PlanInvalidated
from cairn.model.failures import Cancelled, DeadlineExceeded
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.payloads import storable_json
from cairn.model.statuses import NodeStatus
from cairn.observe.sentry import report_failure
from cairn.recording.calls import ModelCalls
from cairn.recording.http import recording
from cairn.workers.aio import Coroutines, EventLoop, is_async
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
    event = NodeSucceeded(
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
    )
    return NodeOutcome(event, NodeStatus.SUCCEEDED, result=output, duration_s=duration)


def execute(
    handler: Callable[..., Any],
    ctx: StepContext,
    message: NodeMessage,
    *,
    check: OnResume | None,
    timeout_s: float | None,
    heartbeats: Heartbeats,
    beat: Beat,
    grace_s: float,
    give_up: Callable[[], None],
    limit_bytes: int,
    http_calls: ModelCalls | None = None,
) -> NodeOutcome:
    """Run the handler — after the workflow's on_resume ``check``, if there is one —
    held to ``timeout_s`` (``give_up``: past it and ``grace_s``, let the claim go)."""
    node, iteration, attempt, phase = (
        message.node,
        message.iteration,
        message.attempt,
        message.phase,
    )
    checker = check.check.resolve() if check is not None else None
    coroutines = None
    if is_async(handler) or (checker is not None and is_async(checker)):
        coroutines = Coroutines()
        stop = Cancelled(f"run {ctx.run_id} no longer needs {message.key}: stopped at its await")
        beat.on_cancel = partial(coroutines.cancel, stop)
        if beat.cancelled.is_set():  # found before the hook was in place
            coroutines.cancel(stop)
    started = time.perf_counter()
    try:
        with (
            limited(
                heartbeats,
                beat,
                timeout_s,
                grace_s,
                what=f"{message.key} attempt {attempt}",
                give_up=give_up,
                coroutines=coroutines,
            ),
            recording(http_calls),
        ):
            if check is not None and checker is not None:
                verdict = call_handler(checker, ctx, coroutines)
                if verdict is False or isinstance(verdict, str):
                    reason = verdict or f"{check.check.path} found the plan no longer holds"
                    ctx.log.warning("plan no longer valid on resume: %s", reason)
                    invalidated = PlanInvalidated(
                        at=0.0, node=node, iteration=iteration, attempt=attempt, reason=reason
                    )
                    return NodeOutcome(invalidated, NodeStatus.CANCELLED, error=reason)
            output = check_output(
                call_handler(handler, ctx, coroutines), limit_bytes, hint=OUTPUT_HINT
            )
    except Cancelled:
        ctx.log.info("stopped at a safe point: the run is being cancelled")
        cancelled = NodeCancelled(
            at=0.0,
            node=node,
            iteration=iteration,
            attempt=attempt,
            phase=phase,
            charges=ctx.charges or None,
        )
        return NodeOutcome(
            cancelled, NodeStatus.CANCELLED, duration_s=time.perf_counter() - started
        )
    except StoreUnavailable:  # cairn's outage, not the handler's failure: give it back
        raise
    except (DeadlineExceeded, Exception) as exc:  # a deadline: transient, "timed out"
        duration = time.perf_counter() - started
        error_class = classify(exc)
        report_failure(exc, error_class)
        text = f"{type(exc).__name__}: {exc}"
        ctx.log.warning("handler failed (%s): %s", error_class.value, text)
        failed = NodeFailed(
            at=0.0,
            node=node,
            iteration=iteration,
            attempt=attempt,
            error_class=error_class,
            message=text,
            phase=phase,
            charges=ctx.charges or None,
            timings=ctx.execution_timings(duration),
            retry_after_s=getattr(exc, "retry_after_s", None),
        )
        return NodeOutcome(
            failed,
            NodeStatus.FAILED,
            error_class=error_class.value,
            error=traceback.format_exc(limit=20),
            duration_s=duration,
        )
    finally:
        beat.on_cancel = None
    return succeeded(ctx, message, output, time.perf_counter() - started)


def call_handler(fn: Callable[..., Any], ctx: StepContext, coroutines: Coroutines | None) -> Any:
    """What ``fn(ctx, state)`` returned — awaited on this process's event loop if it is
    awaitable (cancellable through ``coroutines``)."""
    produced = fn(ctx, ctx.handler_state())
    if not inspect.isawaitable(produced):
        return produced
    if coroutines is None:  # a plain function that returned an awaitable
        return EventLoop.of_process().run(produced)
    return coroutines.run(produced)
