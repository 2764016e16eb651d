"""The step context: what a handler sees of the run, and how it reports back."""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeAlias, TypeVar, overload

from cairn.model.effects import Policy
from cairn.model.failures import BudgetExceeded, Cancelled
from cairn.model.handlers import JSONValue, Message, State
from cairn.model.patches import PatchAnswers
from cairn.model.payloads import json_copy
from cairn.model.state import RunState
from cairn.workers.aio import running_loop

# Types only: a handler module that imports ``cairn.StepContext`` to annotate with must
# not pay for the store, the artifacts and the model SDK glue (about 0.9 s) at import —
# the CLI imports handler modules to check a definition. The worker has them loaded.
if TYPE_CHECKING:
    from cairn.artifacts import Artifacts
    from cairn.effects.ledger import EffectLedger
    from cairn.recording.calls import ModelCalls
    from cairn.store.records import CheckpointRecord
    from cairn.workers.checkpoints import Checkpoints

log = logging.getLogger("cairn.handler")

# Measured by the worker around the handler, not by it: ``ctx.timed`` refuses them.
WORKER_TIMINGS = frozenset({"queue", "run"})

_Client = TypeVar("_Client")
_Params = ParamSpec("_Params")
_Response = TypeVar("_Response")
_Result = TypeVar("_Result", bound=JSONValue)

# What the reconciler does when an applied effect has left no trace (docs/effects.md).
EffectPolicy: TypeAlias = Policy | Literal["flag", "reapply", "compensate"]


@dataclass(frozen=True)
class Progress:
    """What ``ctx.progress`` last reported (``ctx.last_progress``): ``done`` of ``total``."""

    done: float
    total: float | None
    message: str


class StepContext:
    """Passed to every handler as ``ctx``.

    ``ctx.state`` is a read-only view of the run state (return a dict to change it).
    ``ctx.messages`` is the agent's ordered message history: append to it.
    ``ctx.sessions`` holds tool session state (cursors, page positions, session handles —
    never raw secrets): set or update entries; set one to ``None`` to close it.
    Both are saved with the step's result and restored on any later step or recovery.
    """

    def __init__(
        self,
        *,
        run_id: str,
        workflow: str,
        node: str,
        iteration: int,
        attempt: int,
        phase: str,
        state: RunState,
        on_progress: Callable[[Progress], None] | None = None,
        lease_valid: Callable[[], bool] | None = None,
        cancel_requested: Callable[[], bool] | None = None,
        resumed: bool = False,
        allowance: Mapping[str, float] | None = None,
        artifacts: Artifacts | None = None,
        effects: EffectLedger | None = None,
        queued_s: float | None = None,
        checkpoints: Checkpoints | None = None,
        restored: CheckpointRecord | None = None,
        model_calls: ModelCalls | None = None,
        recorded_patches: Mapping[str, bool] | None = None,
    ) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.node = node
        self.iteration = iteration
        self.attempt = attempt
        self.phase = phase
        # Running again after an interruption (its worker was lost, or an operator
        # retried it): an earlier execution may have done part of the work.
        self.resumed = resumed
        self._copy_run_state(state)
        self._on_progress = on_progress
        self._lease_valid = lease_valid
        self._cancel_requested = cancel_requested
        self.last_progress: Progress | None = None
        # Put and read artifacts (large content, with provenance): see docs/artifacts.md.
        self.artifacts: Artifacts = _artifacts_or_unavailable(artifacts, run_id, node)
        if model_calls is not None:  # where its calls' large payloads go, and come back from
            model_calls.artifacts = self.artifacts
        self._effects = effects
        self._start_accounting(allowance, queued_s)
        self.log = logging.LoggerAdapter(
            log, {"run_id": run_id, "node": node, "iteration": iteration, "attempt": attempt}
        )
        # The handler's own notes across checkpoints (small, JSON: where its loop is, what
        # it decided), restored with a checkpoint; never part of the run state.
        self.scratch: dict[str, Any] = {}
        self._checkpoints = checkpoints
        self._model_calls = model_calls
        # The checkpoint this execution resumed from (its number), or None.
        self.resumed_from: int | None = None
        self._patches = PatchAnswers.of(state.patches, iteration, phase, recorded_patches)
        if restored is not None:
            self._restore(restored)

    def _copy_run_state(self, state: RunState) -> None:
        """The handler's own copy of the run state, and what it started from: what the
        step added and changed is told against it when the step ends."""
        self._vars = json_copy(state.vars)
        self.state: Mapping[str, Any] = MappingProxyType(self._vars)
        self.messages: list[Message] = json_copy(state.messages)
        self.sessions: dict[str, Any] = json_copy(state.sessions)
        self._messages_before = len(state.messages)
        self._sessions_before = json_copy(state.sessions)

    def _start_accounting(
        self, allowance: Mapping[str, float] | None, queued_s: float | None
    ) -> None:
        """What the step spends, as it goes: charges against its budget allowance, and
        its time by kind of call."""
        self._allowance = dict(allowance or {})
        self.charges: dict[str, float] = {}
        # Seconds from the message's publish to its claim; None when unknown.
        self.queued_s = queued_s
        # Seconds per kind of call (``ctx.timed``): what the SLA report splits step time by.
        self.timings: dict[str, float] = {}
        self._timings_lock = threading.Lock()
        # Open ``timed`` blocks of each thread: a handler may call tools from a pool.
        self._open_timers = threading.local()

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report progress (e.g. 3 of 10 pages); shown by ``cairn status``. A safe point:
        an automatic checkpoint due is saved here."""
        self.last_progress = Progress(done, total, message)
        if self._on_progress is not None:
            on_loop = running_loop()
            if on_loop is None:
                self._on_progress(self.last_progress)
            else:  # an async handler: the heartbeat's write goes to a thread, not the loop
                on_loop.run_in_executor(None, self._on_progress, self.last_progress)
        self._safe_point()

    # -- checkpoints inside the node --------------------------------------------------

    @property
    def turns(self) -> int:
        """Model turns this node has taken: the assistant messages it added."""
        return sum(1 for m in self.added_messages() if m.get("role") == "assistant")

    def checkpoint(self) -> int:
        """Save this node's working context now — the messages and session changes it
        has added, ``ctx.scratch``, its progress — in one commit, fenced by its claim. A
        re-execution after a crash or a timeout starts from the last one: ``ctx.resumed``
        and ``ctx.resumed_from`` set, ``ctx.messages``, ``ctx.sessions`` and
        ``ctx.scratch`` as they were. Its number (1, 2, ...). In an ``async def``
        handler, ``await ctx.checkpoint_async()`` keeps the event loop free meanwhile."""
        return self._checkpoints_or_fail().save(self.working_context(), self.turns)

    async def checkpoint_async(self) -> int:
        """:meth:`checkpoint`, its commit off the event loop (what it saves is taken
        now, before the await)."""
        checkpoints, context, turns = (
            self._checkpoints_or_fail(),
            self.working_context(),
            self.turns,
        )
        return await asyncio.to_thread(checkpoints.save, context, turns)

    def working_context(self) -> dict[str, Any]:
        """What a checkpoint saves: a copy, so that the handler may go on meanwhile."""
        progress = self.last_progress
        return copy.deepcopy(
            {
                "messages": list(self.added_messages()),
                "sessions": self.changed_sessions(),
                "scratch": self.scratch,
                "progress": None if progress is None else vars(progress),
                "turns": self.turns,
                # Where the execution's recorded model calls stand: a resumed loop's next
                # call is the one after the checkpoint's.
                "model_calls": 0 if self._model_calls is None else self._model_calls.next_index,
                # A resumed execution answers ctx.patched as this one did.
                **({"patches": dict(self.patches)} if self.patches else {}),
            }
        )

    def _restore(self, checkpoint: CheckpointRecord) -> None:
        """Lay a checkpoint over the state this execution started from."""
        saved = checkpoint.context
        self.messages.extend(copy.deepcopy(saved.get("messages") or []))
        for name, value in (saved.get("sessions") or {}).items():
            if value is None:
                self.sessions.pop(name, None)
            else:
                self.sessions[name] = copy.deepcopy(value)
        self.scratch = copy.deepcopy(saved.get("scratch") or {})
        if saved.get("progress"):
            self.last_progress = Progress(**saved["progress"])
        if self._model_calls is not None:
            self._model_calls.next_index = int(saved.get("model_calls") or 0)
        self._patches.given.update(saved.get("patches") or {})
        self.resumed, self.resumed_from = True, checkpoint.seq

    # -- patch markers ------------------------------------------------------------------

    def patched(self, patch_id: str) -> bool:
        """Whether this run takes the code path of patch ``patch_id``: True for a run
        that reaches this point on code with the patch, False for one that passed it
        before (this node already ran in this run without asking). The first answer a run
        gets is its answer from then on — in every node, after a crash, in a replay and
        in a fork — so branch on it, keeping the old path until ``cairn versions`` says
        no run in flight needs it. :class:`~cairn.model.patches.BadPatchId` for an id
        that is not one. See docs/versions.md#patch-markers."""
        return self._patches.ask(patch_id)

    @property
    def patches(self) -> dict[str, bool]:
        """The answers ``ctx.patched`` gave in this execution (for the worker: they ride
        on the step's result event, and a checkpoint keeps them)."""
        return self._patches.given

    def _safe_point(self) -> None:
        checkpoints = self._checkpoints
        if checkpoints is None:
            return
        checkpoints.raise_if_stale()
        turns = self.turns
        if checkpoints.due(turns):
            checkpoints.save_due(self.working_context(), turns)

    def _checkpoints_or_fail(self) -> Checkpoints:
        if self._checkpoints is None:
            raise RuntimeError("this context cannot checkpoint (one built by hand, in a test?)")
        return self._checkpoints

    @property
    def lease_lost(self) -> bool:
        """True once this worker may no longer be the node's holder: stop at a safe point;
        nothing this execution returns will be committed."""
        return self._lease_valid is not None and not self._lease_valid()

    @property
    def cancelled(self) -> bool:
        """True once the run is being cancelled, or no longer needs this node (a join went
        on without it, its timeout passed) — PostgreSQL says so; the heartbeat asks on
        every beat: stop at the next safe point — between model and tool calls, or
        while iterating a stream — by raising :class:`cairn.Cancelled`
        (:meth:`raise_if_cancelled`). What the node returns anyway is kept, readable."""
        return self._cancel_requested is not None and self._cancel_requested()

    def effect(
        self,
        name: str,
        key: str,
        call: Callable[[str], _Result],
        *,
        compensate: Handler | str | None = None,
        policy: EffectPolicy = Policy.FLAG,
    ) -> _Result:
        """Apply an external side effect once, however often this node runs: ``key`` is
        a business key the workflow chooses ("order-123:charge") — the same on every
        retry, recovery and replay. The intent is recorded first, then ``call(key)`` runs
        (pass the key on as the idempotency key: :meth:`idempotency_headers`), then its
        JSON result is recorded and returned — and returned again, without calling, to
        any later execution (so ``call`` returns JSON data: a tuple comes back a
        list). ``policy`` says what the reconciler does if the external
        system later has no trace of it: ``flag`` (for a person), ``reapply`` or
        ``compensate``. See docs/effects.md."""
        if self._effects is None:
            raise RuntimeError("this context has no effects ledger (one built by hand, in a test?)")
        result: _Result = self._effects.effect(
            name, key, call, compensate=compensate, policy=policy
        )
        return result

    async def effect_async(
        self,
        name: str,
        key: str,
        call: Callable[[str], Awaitable[_Result]],
        *,
        compensate: Handler | str | None = None,
        policy: EffectPolicy = Policy.FLAG,
        cancellable: bool = False,
    ) -> _Result:
        """:meth:`effect` for an async handler: ``await ctx.effect_async(name, key,
        call)`` with ``call(key)`` a coroutine function. If the node is cancelled while
        the call is out, the call is not cut short: it is awaited to its end (up to the
        workflow's ``cancel_timeout``; then it is detached and recorded ``unknown`` for
        the reconciler) — unless ``cancellable``, when it is cancelled with the node and
        recorded ``unknown``."""
        if self._effects is None:
            raise RuntimeError("this context has no effects ledger (one built by hand, in a test?)")
        result: _Result = await self._effects.effect_async(
            name, key, call, compensate=compensate, policy=policy, cancellable=cancellable
        )
        return result

    @property
    def model_calls(self) -> ModelCalls | None:
        """The execution's recorded calls (its model calls, and with ``record: http`` its
        own HTTP), or None where there is nothing to fence them by."""
        return self._model_calls

    @overload
    def model(
        self,
        client: Callable[_Params, _Response],
        *,
        provider: str,
        usage: Callable[[_Response], Mapping[str, Any] | None] | None = None,
        encode: Callable[[_Response], JSONValue] | None = None,
        decode: Callable[[JSONValue], _Response] | None = None,
    ) -> Callable[_Params, _Response]: ...

    @overload
    def model(self, client: _Client) -> _Client: ...

    def model(
        self,
        client: Any,
        *,
        provider: str | None = None,
        usage: Callable[[Any], Mapping[str, Any] | None] | None = None,
        encode: Callable[[Any], Any] | None = None,
        decode: Callable[[Any], Any] | None = None,
    ) -> Any:
        """``client`` — an ``openai`` or ``anthropic`` SDK client, sync or async — with
        its model calls recorded: the same interface (``.chat.completions.create``,
        ``.responses.create``, ``.messages.create``, ``stream=True`` and the ``.stream``
        helpers), each completed call committed as it completes, answered from the record
        when the node runs again or is replayed, its usage charged to the budget.

        Any other client: pass its call (a function or coroutine function taking keyword
        arguments) with ``provider=`` its name, and ``usage=`` a function reading a
        response's token counts; ``encode``/``decode`` turn responses that are not JSON
        data or pydantic models into JSON and back. See docs/models.md.

        Typed as what it is given: the recorded client has the SDK client's type (its
        methods and their arguments, checked by mypy), the recorded function the
        function's signature."""
        if self._model_calls is None:
            raise RuntimeError(
                f"{self.node} cannot record model calls: an ephemeral node has no execution "
                "row to fence them by (or this context was built by hand)"
            )
        from cairn.recording.sdk import (  # noqa: PLC0415 - see the imports
            recorded_client,
            recorded_function,
        )

        if provider is not None:
            if not callable(client):
                raise TypeError(f"ctx.model(..., provider={provider!r}) takes a function")
            return recorded_function(
                self,
                self._model_calls,
                client,
                provider=provider,
                usage=usage,
                encode=encode,
                decode=decode,
            )
        if (usage, encode, decode) != (None, None, None):
            raise TypeError("usage=, encode= and decode= go with provider= (a function)")
        return recorded_client(self, self._model_calls, client)

    def idempotency_headers(self, key: str) -> dict[str, str]:
        """``{"Idempotency-Key": key, "X-Cairn-Fence": <this claim's fencing token>}``
        (in a live fork, the key scoped to the fork, as ``ctx.effect`` records it)."""
        from cairn.effects.ledger import idempotency_headers  # noqa: PLC0415 - see the imports

        if self._effects is None:
            return idempotency_headers(key)
        return idempotency_headers(self._effects.scoped(key), self._effects.fence)

    def charge(self, **amounts: float) -> None:
        """Report what this step spent (``ctx.charge(tokens=1834, usd=0.02)``): counted
        against the run's budget, its branch's part and its node's, with the step's
        result. Past what the execution may spend, raises :class:`cairn.BudgetExceeded`
        (the charge still counts: it was spent)."""
        for unit, amount in amounts.items():
            if isinstance(amount, bool) or not isinstance(amount, int | float):
                raise TypeError(f"ctx.charge({unit}=...) takes a number, not {amount!r}")
            if not 0 <= amount < math.inf:
                raise ValueError(f"ctx.charge({unit}={amount!r}): amounts are finite and >= 0")
        for unit, amount in amounts.items():
            self.charges[unit] = self.charges.get(unit, 0.0) + float(amount)
        over = [
            f"{self.charges[unit]:g} of {self._allowance[unit]:g} {unit}"
            for unit in amounts
            if unit in self._allowance and self.charges[unit] > self._allowance[unit]
        ]
        if over:
            raise BudgetExceeded(f"{self.node} is over its budget: spent {', '.join(over)}")

    def remaining(self, unit: str) -> float | None:
        """What this execution may still spend of ``unit`` (None: no limit)."""
        if unit not in self._allowance:
            return None
        return max(0.0, self._allowance[unit] - self.charges.get(unit, 0.0))

    @contextmanager
    def timed(self, kind: str, *, name: str | None = None) -> Iterator[None]:
        """Time a call: ``with ctx.timed("model"): ...``, ``with ctx.timed("tool",
        name="search"): ...``. Repeated blocks add up per kind (and per ``kind:name``);
        the totals ride on the step's result event and ``cairn sla`` splits step time
        into ``model``, ``tool`` and the rest. A block nested in another counts for the
        inner kind only, so that the kinds never add up to more than the handler took;
        blocks running at once in several threads each count in full."""
        if not kind or kind in WORKER_TIMINGS:
            reserved = ", ".join(sorted(WORKER_TIMINGS))
            raise ValueError(f"ctx.timed needs a kind other than {reserved}, got {kind!r}")
        open_blocks: list[list[float]] | None = getattr(self._open_timers, "blocks", None)
        if open_blocks is None:
            open_blocks = self._open_timers.blocks = []
        nested_s = [0.0]  # time inside blocks opened within this one
        open_blocks.append(nested_s)
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            open_blocks.pop()
            if open_blocks:
                open_blocks[-1][0] += elapsed
            own = max(0.0, elapsed - nested_s[0])
            with self._timings_lock:
                self.timings[kind] = self.timings.get(kind, 0.0) + own
                if name:
                    key = f"{kind}:{name}"
                    self.timings[key] = self.timings.get(key, 0.0) + own

    def execution_timings(self, run_s: float) -> dict[str, float]:
        """What the result event carries: the ``timed`` totals, the handler's whole time
        (``run``) and, when known, the message's wait for a worker (``queue``)."""
        with self._timings_lock:
            timings = dict(self.timings)
        timings["run"] = run_s
        if self.queued_s is not None:
            timings["queue"] = self.queued_s
        return {kind: round(seconds, 6) for kind, seconds in timings.items()}

    def raise_if_cancelled(self) -> None:
        """A safe point: raise :class:`cairn.Cancelled` if the run is being cancelled
        (and save an automatic checkpoint, if one is due)."""
        if self.cancelled:
            raise Cancelled(f"run {self.run_id} is being cancelled")
        self._safe_point()

    def handler_state(self) -> State:
        """The state for the handler's ``state`` argument: this context's private copy
        (what the handler changes there reaches the run only through its return value)."""
        return self._vars

    def added_artifacts(self) -> dict[str, dict[str, Any]]:
        """The artifacts this execution created, for the worker to record with its step."""
        return self.artifacts.created()

    def added_messages(self) -> tuple[Message, ...]:
        """The messages appended to ``ctx.messages`` in this execution (for the worker)."""
        return tuple(self.messages[self._messages_before :])

    def changed_sessions(self) -> dict[str, Any]:
        """The sessions set, changed or closed (``None``) in this execution (for the
        worker)."""
        changed: dict[str, Any] = {
            name: value
            for name, value in self.sessions.items()
            if self._sessions_before.get(name) != value
        }
        for name in self._sessions_before:
            if name not in self.sessions:
                changed[name] = None
        return changed


def _artifacts_or_unavailable(artifacts: Artifacts | None, run_id: str, node: str) -> Artifacts:
    """``artifacts``; for a context built without them (by hand, in a test), artifacts
    that say they are unavailable."""
    if artifacts is not None:
        return artifacts
    from cairn.artifacts import Artifacts  # noqa: PLC0415 - see the imports

    return Artifacts.unavailable(run_id, node)


SyncHandler: TypeAlias = Callable[[StepContext, State], State | None]
AsyncHandler: TypeAlias = Callable[[StepContext, State], Awaitable[State | None]]
Handler: TypeAlias = SyncHandler | AsyncHandler
"""A handler, a compensation or an on-resume check: ``fn(ctx, state)``, plain or async,
returning what to merge into the run state (or None)."""
