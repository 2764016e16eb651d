"""The step context: what a handler sees of the run, and how it reports back."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cairn.artifacts import Artifacts
from cairn.effects.ledger import EffectLedger, idempotency_headers
from cairn.failures import BudgetExceeded, Cancelled
from cairn.orchestrator.state import RunState

log = logging.getLogger("cairn.handler")


@dataclass(frozen=True)
class Progress:
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
        self._vars = copy.deepcopy(state.vars)
        self.state: Mapping[str, Any] = MappingProxyType(self._vars)
        self.messages: list[dict[str, Any]] = copy.deepcopy(state.messages)
        self.sessions: dict[str, Any] = copy.deepcopy(state.sessions)
        self._messages_before = len(state.messages)
        self._sessions_before = copy.deepcopy(state.sessions)
        self._on_progress = on_progress
        self._lease_valid = lease_valid
        self._cancel_requested = cancel_requested
        self.last_progress: Progress | None = None
        # Put and read artifacts (large content, with provenance): see docs/artifacts.md.
        self.artifacts = artifacts if artifacts is not None else Artifacts.unavailable(run_id, node)
        self._effects = effects
        self._allowance = dict(allowance or {})
        self.charges: dict[str, float] = {}
        self.log = logging.LoggerAdapter(
            log, {"run_id": run_id, "node": node, "iteration": iteration, "attempt": attempt}
        )

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report progress (e.g. 3 of 10 pages); shown by ``cairn status``."""
        self.last_progress = Progress(done, total, message)
        if self._on_progress is not None:
            self._on_progress(self.last_progress)

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
        call: Callable[[str], Any],
        *,
        compensate: Callable[..., Any] | str | None = None,
        policy: str = "flag",
    ) -> Any:
        """Apply an external side effect once, however often this node runs: ``key`` is
        a business key the workflow chooses ("order-123:charge") — the same on every
        retry, recovery and replay. The intent is recorded first, then ``call(key)`` runs
        (pass the key on as the idempotency key: :meth:`idempotency_headers`), then its
        JSON result is recorded and returned — and returned again, without calling, to
        any later execution. ``policy`` says what the reconciler does if the external
        system later has no trace of it: ``flag`` (for a person), ``reapply`` or
        ``compensate``. See docs/effects.md."""
        if self._effects is None:
            raise RuntimeError("this context has no effects ledger (one built by hand, in a test?)")
        return self._effects.effect(name, key, call, compensate=compensate, policy=policy)

    def idempotency_headers(self, key: str) -> dict[str, str]:
        """``{"Idempotency-Key": key, "X-Cairn-Fence": <this claim's fencing token>}``."""
        fence = self._effects.fence if self._effects is not None else None
        return idempotency_headers(key, fence)

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

    def raise_if_cancelled(self) -> None:
        """A safe point: raise :class:`cairn.Cancelled` if the run is being cancelled."""
        if self.cancelled:
            raise Cancelled(f"run {self.run_id} is being cancelled")

    def handler_state(self) -> dict[str, Any]:
        """The state for the handler's ``state`` argument: this context's private copy
        (what the handler changes there reaches the run only through its return value)."""
        return self._vars

    def added_artifacts(self) -> dict[str, dict[str, Any]]:
        return self.artifacts.created()

    def added_messages(self) -> tuple[dict[str, Any], ...]:
        return tuple(self.messages[self._messages_before :])

    def changed_sessions(self) -> dict[str, Any]:
        changed: dict[str, Any] = {
            name: value
            for name, value in self.sessions.items()
            if self._sessions_before.get(name) != value
        }
        for name in self._sessions_before:
            if name not in self.sessions:
                changed[name] = None
        return changed
