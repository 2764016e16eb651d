"""Model calls, recorded as an execution makes them: the messages each call sent, stored
once by digest, and the call itself — written only while the execution is still the
writer's, read back by a re-execution and by replays."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import ClauseElement, exists, literal, select

from cairn.model.keys import Claim, ExecutionKey
from cairn.store.base import TxBase
from cairn.store.clauses import current
from cairn.store.records import ModelCallRecord
from cairn.store.schema import events, model_calls, model_messages

CALL_COLUMNS = (
    "run_id",
    "node",
    "iteration",
    "phase",
    "call_index",
    "attempt",
    "fence",
    "provider",
    "operation",
    "model",
    "params",
    "messages",
    "response",
    "usage",
    "latency_s",
    "history",
    "recorded_at",  # last: stamped by the statement
)

# The events a worker ends an attempt by, with what it spent, that another attempt of the
# same execution may follow (a succeeded one is the execution's last).
REPORTED_ENDS = ("node_failed", "node_cancelled")


class ModelCallsTx(TxBase):
    """The model_calls and model_messages tables."""

    def record_model_call(
        self,
        key: ExecutionKey,
        attempt: int,
        fence: int,
        call: Mapping[str, Any],
        messages: Mapping[str, Any],
        *,
        claim: Claim | None = None,
    ) -> bool:
        """Record ``call`` (its index, provider, operation, model, params, message digests,
        response, usage, latency) and the ``messages`` (digest -> body) not stored yet —
        only while the execution is unfinished at ``attempt`` with no claim newer than
        ``fence`` (or, ``claim`` given, while that claim is current: see
        ``save_checkpoint``); a call recorded again at its index (a re-execution that sent
        something else) replaces the earlier record. False if it was refused."""
        now = self.stamp()
        if not isinstance(now, ClauseElement):
            now = literal(now, model_calls.c.recorded_at.type)
        if messages:
            stored = self._insert(model_messages).values(
                [{"digest": d, "body": body, "created_at": now} for d, body in messages.items()]
            )
            self.connection.execute(stored.on_conflict_do_nothing())
        active = exists().where(current(claim or Claim(key, attempt, fence)))
        values = {
            **{name: call[name] for name in CALL_COLUMNS if name in call},
            "run_id": key.run_id,
            "node": key.node,
            "iteration": key.iteration,
            "phase": key.phase,
            "attempt": attempt,
            "fence": fence,
        }
        row = select(
            *(
                literal(values[name], model_calls.c[name].type)
                for name in CALL_COLUMNS
                if name != "recorded_at"
            ),
            now,
        ).where(active)
        insert = self._insert(model_calls).from_select(list(CALL_COLUMNS), row)
        excluded = insert.excluded
        upsert = insert.on_conflict_do_update(
            index_elements=["run_id", "node", "iteration", "phase", "call_index"],
            set_={name: excluded[name] for name in CALL_COLUMNS[5:]},
            where=model_calls.c.fence <= excluded.fence,
        )
        written = self.connection.execute(upsert.returning(model_calls.c.call_index)).first()
        return written is not None

    def model_calls_of(self, key: ExecutionKey) -> list[ModelCallRecord]:
        """The calls execution ``key`` recorded, by index, each with the full list of the
        digests it sent (a call that sent an earlier call's messages and more is stored as
        that call's index and what it added: see :func:`messages_stored`)."""
        rows = self.connection.execute(
            select(model_calls)
            .where(
                model_calls.c.run_id == key.run_id,
                model_calls.c.node == key.node,
                model_calls.c.iteration == key.iteration,
                model_calls.c.phase == key.phase,
            )
            .order_by(model_calls.c.call_index)
        )
        return _records(rows)

    def charged_attempts(self, key: ExecutionKey) -> frozenset[int]:
        """The attempts of execution ``key`` whose end a worker reported with charges: what
        their calls used is counted already (a crashed attempt's charges were lost with it)."""
        rows = self.connection.execute(
            select(events.c.data).where(
                events.c.run_id == key.run_id,
                events.c.type.in_(REPORTED_ENDS),
            )
        ).scalars()
        return frozenset(
            int(data.get("attempt", 1))
            for data in rows
            if data.get("charges")
            and data.get("node") == key.node
            and data.get("iteration", 1) == key.iteration
            and data.get("phase", "run") == key.phase
        )

    def model_calls_of_run(self, run_id: str, node: str | None = None) -> list[ModelCallRecord]:
        """Every call the run's executions recorded (of ``node`` only, if given): each
        execution's in order of index, the executions in the order they began."""
        query = select(model_calls).where(model_calls.c.run_id == run_id)
        if node is not None:
            query = query.where(model_calls.c.node == node)
        rows = self.connection.execute(
            query.order_by(
                model_calls.c.node,
                model_calls.c.iteration,
                model_calls.c.phase,
                model_calls.c.call_index,
            )
        )
        found = _records(rows)
        first: dict[tuple[str, int, str], Any] = {}
        for call in found:
            first.setdefault((call.node, call.iteration, call.phase), call.recorded_at)
        return sorted(
            found,
            key=lambda c: (first[c.node, c.iteration, c.phase], c.node, c.iteration, c.call_index),
        )

    def model_messages(self, digests: Sequence[str]) -> dict[str, Any]:
        """The stored messages of these digests (digest -> body)."""
        if not digests:
            return {}
        rows = self.connection.execute(
            select(model_messages.c.digest, model_messages.c.body).where(
                model_messages.c.digest.in_(list(set(digests)))
            )
        )
        return {row.digest: row.body for row in rows}


def _records(rows: Any) -> list[ModelCallRecord]:
    """Rows of calls, ordered by execution then index, as records with their messages
    (and history) expanded to full lists of digests."""
    sent: dict[tuple[Any, ...], list[str]] = {}
    passed: dict[tuple[Any, ...], list[str]] = {}  # each call's whole conversation
    found = []
    for row in rows:
        record = ModelCallRecord.of(row)
        execution = (record.node, record.iteration, record.phase)
        mine = {k[-1]: v for k, v in sent.items() if k[:-1] == execution}
        whole = {k[-1]: v for k, v in passed.items() if k[:-1] == execution}
        messages = _expanded(row.messages, mine)
        history = None if row.history is None else _expanded(row.history, whole)
        sent[(*execution, record.call_index)] = messages
        passed[(*execution, record.call_index)] = history if history is not None else messages
        found.append(replace(record, messages=messages, history=history))
    return found


def _expanded(stored: Any, earlier: Mapping[int, Sequence[str]]) -> list[str]:
    if isinstance(stored, dict):  # {"after": k, "added": [...]}
        return [*earlier.get(int(stored["after"]), []), *stored["added"]]
    return list(stored)


def messages_stored(digests: Sequence[str], earlier: Mapping[int, Sequence[str]]) -> Any:
    """What a call's ``messages`` column holds: the digests it sent — or, when an earlier
    call's are a prefix of them (an agent sends its whole history each turn), that call's
    index and the digests added since, so that a conversation's record grows with its
    length, not with its square."""
    for index in sorted(earlier, reverse=True):  # the latest call is the likeliest prefix
        before = list(earlier[index])
        if before and len(before) <= len(digests) and list(digests[: len(before)]) == before:
            return {"after": index, "added": list(digests[len(before) :])}
    return list(digests)
