"""Checkpoints inside a node, as the worker keeps them: an execution's working context —
the messages and session changes it has added, its scratch mapping, its progress — saved
while it runs (one statement, one commit, fenced by its claim, written by the engine:
:mod:`cairn.engine.node_checkpoints`), read back by the
execution that runs it again after a crash or a timeout, and forgotten once its result
is committed.

What is saved is what the node has *added* since it started, never the run's whole
history: a re-execution lays it over the state it starts from, so what other nodes
committed meanwhile is kept. And each checkpoint after the first stores only what
changed since the one before (the messages appended, the fields that changed): the
100th checkpoint of an agent loop writes its newest turn, not its history again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cairn.errors import InvalidInput
from cairn.model.definition import CheckpointPolicy
from cairn.model.deltas import delta
from cairn.model.failures import PermanentError, StaleClaim
from cairn.model.keys import Claim, ExecutionKey
from cairn.model.payloads import storable_json
from cairn.reconnect import store_through_outages
from cairn.store.records import CheckpointRecord
from cairn.workers.aio import running_loop
from cairn.workers.ports import CheckpointRecords

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass
class Checkpoints:
    """The checkpoints of one execution: ``key`` at ``attempt`` under the claim
    ``fence``."""

    book: CheckpointRecords
    key: ExecutionKey
    attempt: int
    fence: int
    max_bytes: int
    reconnect_within: float
    # Does this worker still trust its claim? Asked before each save: False, StaleClaim.
    lease_trusted: Callable[[], bool] | None = None
    # When to save without being asked (the node's ``checkpoint:``); None: only when asked.
    policy: CheckpointPolicy | None = None
    # The claim its saves are fenced by, when not its own (a node fused after an ephemeral
    # one: the chain's first); None: its own (``key``, ``attempt``, ``fence``).
    claim: Claim | None = None
    saved: int = 0  # the number of the last checkpoint saved or resumed from (0: none)
    # That checkpoint's context, whole: the next one stores only what changed since.
    _saved_context: Mapping[str, Any] | None = None
    _saving: threading.Lock = field(default_factory=threading.Lock)  # one save at a time
    _last_at: float = field(default_factory=time.monotonic)
    _last_turns: int = 0
    _in_flight: threading.Event = field(default_factory=threading.Event)
    # A background save that found the claim stale: raised at the next safe point.
    stale: StaleClaim | None = None

    def due(self, turns: int) -> bool:
        """Has the node's policy a checkpoint due, ``turns`` model turns in?"""
        policy = self.policy
        if policy is None or self._in_flight.is_set():
            return False
        if policy.turns is not None and turns - self._last_turns >= policy.turns:
            return True
        every = policy.every
        return every is not None and time.monotonic() - self._last_at >= every.total_seconds()

    def save_due(self, context: Mapping[str, Any], turns: int) -> None:
        """An automatic checkpoint at a safe point: saved here and now, or — on an event
        loop, where a handler awaits — by a thread, so that the loop is not held for the
        commit (one at a time; a safe point meanwhile skips its own). A failure is
        logged, not raised: the handler asked for none — but a stale claim is, at this
        safe point or the next: the handler must stop."""
        loop = running_loop()
        if loop is None:
            self._save_quietly(context, turns)
            self.raise_if_stale()
            return
        self._in_flight.set()
        loop.run_in_executor(None, self._save_quietly, context, turns)

    def raise_if_stale(self) -> None:
        if self.stale is not None:
            raise self.stale

    def _save_quietly(self, context: Mapping[str, Any], turns: int) -> None:
        try:
            self.save(context, turns)
        except StaleClaim as stale:
            self.stale = stale
        except Exception:
            log.warning("automatic checkpoint of %s failed", self.key, exc_info=True)
        finally:
            self._in_flight.clear()

    def save(self, context: Mapping[str, Any], turns: int) -> int:
        """Save ``context`` (``turns`` model turns in) as this execution's checkpoint;
        its number. StaleClaim, with nothing written, if the claim is no longer this
        worker's."""
        if self.lease_trusted is not None and not self.lease_trusted():
            raise self._stale("its lease is no longer trusted")
        self._check(context)
        with self._saving:
            base, last = self.saved, self._saved_context
            # What changed since the last checkpoint (its newest messages), or the whole
            # context when there is none to extend.
            stored = delta(last, context) if base and last is not None else context

            def write() -> int | None:
                return self.book.save(
                    self.key,
                    self.attempt,
                    self.fence,
                    stored,
                    base=base if stored is not context else 0,
                    claim=self.claim,
                )

            seq = self._through_outages("saving a checkpoint", write)
            if seq is None:
                raise self._stale("it finished, or a newer claim took it over")
            self.saved, self._saved_context = seq, context
            self._last_at, self._last_turns = time.monotonic(), turns
        return seq

    def _check(self, context: Mapping[str, Any]) -> None:
        """What a live save would refuse: not JSON, or larger than ``max_bytes``."""
        try:
            storable_json(context, what="a checkpoint", limit_bytes=self.max_bytes)
        except InvalidInput as exc:
            raise PermanentError(f"{exc} (keep large content as an artifact)") from exc

    def load(self) -> CheckpointRecord | None:
        """The checkpoint an earlier execution of this key left, if any."""
        found = self._through_outages(
            "reading its checkpoint", lambda: self.book.checkpoint_of(self.key)
        )
        if found is None or found.attempt > self.attempt:
            return None
        self.saved, self._last_turns = found.seq, int(found.context.get("turns", 0))
        self._saved_context = found.context
        return found

    def forget(self) -> None:
        """The execution's result is committed: its checkpoint is of no more use (best
        effort: a left one is overwritten or deleted with its run)."""
        if not self.saved:
            return
        try:
            self.book.drop(self.key)
        except Exception:
            log.warning("could not delete the checkpoint of %s", self.key, exc_info=True)

    def _stale(self, why: str) -> StaleClaim:
        log.warning("checkpoint of %s not saved: claim (fence %d): %s", self.key, self.fence, why)
        return StaleClaim(
            f"{self.key}: this worker's claim (fence {self.fence}) is stale ({why}): "
            "checkpoint not saved"
        )

    def _through_outages(self, what: str, work: Callable[[], _T]) -> _T:
        return store_through_outages(self.reconnect_within, f"{self.key}: {what}", work)
