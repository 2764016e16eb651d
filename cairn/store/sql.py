"""The store's port: :class:`Store` hands out transactions, :class:`Tx` is every
statement the engine, workers and scheduler run, grouped by the tables they touch
(:mod:`~cairn.store.runs`, :mod:`~cairn.store.executions`,
:mod:`~cairn.store.messages`, :mod:`~cairn.store.effects`,
:mod:`~cairn.store.checkpoints`, :mod:`~cairn.store.model_calls`, :mod:`~cairn.store.schedules`,
:mod:`~cairn.store.starts`, :mod:`~cairn.store.access`, :mod:`~cairn.store.definitions`,
:mod:`~cairn.store.versions`, :mod:`~cairn.store.artifacts`)
and the write path of a step above them (:mod:`~cairn.store.steps`), written once in
dialect-neutral SQLAlchemy Core. A backend subclasses both — PostgreSQL with its
one-statement hot path (:mod:`cairn.store.postgres`), SQLite for the embedded default
(:mod:`cairn.store.sqlite`) — and :func:`cairn.store.backends.store_for` picks the one
for a database. The same contract suite runs on both (:mod:`cairn.testing.store_contract`).

Every status change is a guarded write (``UPDATE ... WHERE status IN (...)``, a fence, an
attempt), and what a zero-row result means is the method's to say.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

from sqlalchemy import Engine, select

from cairn.store.access import AccessTx
from cairn.store.artifacts import ArtifactsTx
from cairn.store.builds import BuildsTx
from cairn.store.checkpoints import CheckpointsTx
from cairn.store.code_faults import CodeFaultsTx
from cairn.store.definitions import DefinitionsTx
from cairn.store.effects import EffectsTx
from cairn.store.errors import translated
from cairn.store.model_calls import ModelCallsTx
from cairn.store.pauses import PausesTx
from cairn.store.schedules import SchedulesTx
from cairn.store.sessions import SessionsTx
from cairn.store.slots import SlotsTx
from cairn.store.starts import StartsTx
from cairn.store.steps import StepsTx
from cairn.store.versions import VersionsTx


class Tx(
    StepsTx,
    DefinitionsTx,
    EffectsTx,
    CheckpointsTx,
    ModelCallsTx,
    SlotsTx,
    SchedulesTx,
    StartsTx,
    AccessTx,
    PausesTx,
    SessionsTx,
    CodeFaultsTx,
    BuildsTx,
    VersionsTx,
    ArtifactsTx,
):
    """Every statement of the store, on one transaction."""


class Store:
    """The database: transactions, read-only connections, and the hot path's statements.
    A backend subclasses it; :func:`~cairn.store.backends.store_for` picks one."""

    tx_class: ClassVar[type[Tx]] = Tx
    # Whether a branch's success may merge onto its run as it is by then
    # (Tx.merge_step): only where one statement can take the run's next seq under its
    # lock — elsewhere one process writes, and its run lock orders the branches already.
    merges_branches: ClassVar[bool] = False

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    def dispose(self) -> None:
        """Close every pooled connection (after a fork, a restart of the database, or at
        the end)."""
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        with translated(), self.engine.begin() as connection, translated(connection):
            yield self.tx_class(connection)

    @contextmanager
    def reading(self) -> Iterator[Tx]:
        """A read-only transaction, ended by a rollback: reads never count as commits."""
        with translated(), self.engine.connect() as plain, translated(plain):
            connection = plain.execution_options(cairn_read_only=True)
            yield self.tx_class(connection)
            connection.rollback()

    @contextmanager
    def statements(self, *, writes: bool = False) -> Iterator[Tx]:
        """Where each statement is a transaction of its own (the hot path: its read and
        its write are one statement each), if the backend has such connections;
        elsewhere a transaction, read-only unless the caller ``writes``."""
        with self.transaction() if writes else self.reading() as tx:
            yield tx

    def ping(self) -> None:
        """Ask the database something trivial (a readiness probe); StoreUnavailable if it
        cannot answer."""
        with self.reading() as tx:
            tx.connection.execute(select(1))
