"""Registered definitions and who may see them (migration 0022): the statements.

A definition belongs to a namespace; (namespace, name, version) is immutable once
registered. A namespace **sees** its own definitions and those another namespace's
admin shared with it (``workflow_shares``: every version, stored as version 0, or
one). Whether a bare name means the caller's own workflow or a shared one is decided
here, in one read (:meth:`DefinitionsTx.visible_workflow`); a workflow the caller may
not see is simply not found, as if it did not exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, exists, or_, select

from cairn.errors import VersionConflict
from cairn.store.base import TxBase
from cairn.store.records import spec_digest, to_epoch, utcnow
from cairn.store.schema import workflow_shares, workflows

EVERY_VERSION = 0  # a share's version that stands for every version, registered or to come


@dataclass(frozen=True)
class VisibleWorkflow:
    """What a name means to a namespace: the namespace that owns the workflow it means
    (None: none it may see), its newest version it may see (or the one asked, if it
    may), every namespace that offers it a workflow of that name, and the database's
    clock."""

    owner: str | None
    version: int | None
    owners: tuple[str, ...]
    now: float


@dataclass(frozen=True)
class ListedWorkflow:
    namespace: str
    name: str
    version: int
    registered_at: float


@dataclass(frozen=True)
class ShareRecord:
    namespace: str  # the owner's
    workflow: str
    grantee: str
    version: int | None  # None: every version
    created_at: float
    created_by: str

    @classmethod
    def of(cls, row: Any) -> ShareRecord:
        version = None if row.version == EVERY_VERSION else int(row.version)
        return cls(
            row.namespace,
            row.workflow,
            row.grantee,
            version,
            to_epoch(row.created_at),
            row.created_by,
        )


def visible_to(caller: str) -> ColumnElement[bool]:
    """The definitions ``caller`` may see: its own, and those shared with it."""
    shared = exists().where(
        workflow_shares.c.namespace == workflows.c.namespace,
        workflow_shares.c.workflow == workflows.c.name,
        workflow_shares.c.grantee == caller,
        workflow_shares.c.version.in_([EVERY_VERSION, workflows.c.version]),
    )
    return or_(workflows.c.namespace == caller, shared)


def chosen(
    caller: str, visible: list[tuple[str, int]], version: int | None, now: float
) -> VisibleWorkflow:
    """Of the (namespace, version) pairs ``caller`` may see, the namespace a name means
    (its own, else the one other that offers it) and its newest version there — or
    ``version``, if it is among them."""
    owners = tuple(sorted({namespace for namespace, _number in visible}))
    owner = caller if caller in owners else owners[0] if len(owners) == 1 else None
    numbers = [
        number
        for namespace, number in visible
        if namespace == owner and (version is None or number == version)
    ]
    return VisibleWorkflow(owner, max(numbers, default=None), owners, now)


class DefinitionsTx(TxBase):
    """Definitions, by namespace, and the shares that let other namespaces see them."""

    def register_workflow(
        self,
        namespace: str,
        name: str,
        version: int,
        spec: Mapping[str, Any],
        definition_format: int,
    ) -> bool:
        """Insert a definition compiled under ``definition_format``; True if new. A
        different spec under a taken (namespace, name, version) is a
        :class:`VersionConflict`: a version is immutable once runs may have pinned it —
        and so is the format it was compiled under."""
        digest = spec_digest(spec)
        stmt = (
            self._insert(workflows)
            .values(
                namespace=namespace,
                name=name,
                version=version,
                digest=digest,
                spec=dict(spec),
                registered_at=utcnow(),
                format=definition_format,
            )
            .on_conflict_do_nothing()
            .returning(workflows.c.name)  # not rowcount: -1 for a skipped insert here
        )
        if self.connection.execute(stmt).first() is not None:
            return True
        existing = self.connection.execute(
            select(workflows.c.digest).where(
                _named(namespace, name), workflows.c.version == version
            )
        ).scalar_one()
        if existing != digest:
            raise VersionConflict(
                f"workflow {name} version {version} is already registered in namespace "
                f"{namespace!r} with a different definition; register the change as a new "
                "version"
            )
        return False

    def workflow_spec(
        self, namespace: str, name: str, version: int | None = None
    ) -> tuple[int, dict[str, Any], int]:
        """(version, spec, the format it was registered under) of ``namespace``'s
        workflow — the newest, unless ``version`` is given; (0, {}, 0) if none."""
        query = select(workflows.c.version, workflows.c.spec, workflows.c.format).where(
            _named(namespace, name)
        )
        if version is not None:
            query = query.where(workflows.c.version == version)
        row = self.connection.execute(query.order_by(workflows.c.version.desc()).limit(1)).first()
        if row is None:
            return 0, {}, 0
        return row.version, dict(row.spec), int(row.format)

    def visible_workflow(
        self, caller: str, name: str, owner: str | None, version: int | None
    ) -> VisibleWorkflow:
        """What ``name`` (of ``owner``, or — None — a bare name) means to ``caller``:
        its own workflow of that name if it has one, else the one namespace that shares
        one with it (several: :attr:`VisibleWorkflow.owner` is None, ``owners`` says
        which)."""
        return chosen(caller, self.visible_versions(caller, name, owner), version, self.now())

    def visible_versions(self, caller: str, name: str, owner: str | None) -> list[tuple[str, int]]:
        """Every (namespace, version) of ``name`` that ``caller`` may see (of ``owner``
        only, if given)."""
        seen = and_(workflows.c.name == name, visible_to(caller))
        if owner is not None:
            seen = and_(seen, workflows.c.namespace == owner)
        query = select(workflows.c.namespace, workflows.c.version).where(seen)
        return [
            (str(namespace), int(number)) for namespace, number in self.connection.execute(query)
        ]

    def visible_workflows(self, caller: str) -> list[ListedWorkflow]:
        """Every definition ``caller`` may see, by namespace, name and version."""
        rows = self.connection.execute(
            select(
                workflows.c.namespace,
                workflows.c.name,
                workflows.c.version,
                workflows.c.registered_at,
            )
            .where(visible_to(caller))
            .order_by(workflows.c.namespace, workflows.c.name, workflows.c.version)
        )
        return [
            ListedWorkflow(row.namespace, row.name, row.version, to_epoch(row.registered_at))
            for row in rows
        ]

    def registered_workflows(self) -> list[Any]:
        """Every definition of every namespace (the operator's view, in the CLI)."""
        return list(
            self.connection.execute(
                select(
                    workflows.c.namespace,
                    workflows.c.name,
                    workflows.c.version,
                    workflows.c.registered_at,
                ).order_by(workflows.c.namespace, workflows.c.name, workflows.c.version)
            )
        )

    def share_workflow(
        self, namespace: str, workflow: str, grantee: str, version: int | None, by: str
    ) -> bool:
        """Let ``grantee`` see ``namespace``'s ``workflow`` (``version``; None: every
        version); True if it is new, False if it was shared so already."""
        stmt = (
            self._insert(workflow_shares)
            .values(
                namespace=namespace,
                workflow=workflow,
                grantee=grantee,
                version=EVERY_VERSION if version is None else version,
                created_at=utcnow(),
                created_by=by,
            )
            .on_conflict_do_nothing()
            .returning(workflow_shares.c.workflow)
        )
        return self.connection.execute(stmt).first() is not None

    def unshare_workflow(
        self, namespace: str, workflow: str, grantee: str, version: int | None
    ) -> int:
        """Revoke a share (``version`` None: the share of every version); how many went."""
        shared = EVERY_VERSION if version is None else version
        return int(
            self.connection.execute(
                delete(workflow_shares).where(
                    workflow_shares.c.namespace == namespace,
                    workflow_shares.c.workflow == workflow,
                    workflow_shares.c.grantee == grantee,
                    workflow_shares.c.version == shared,
                )
            ).rowcount
        )

    def shares_of(self, namespace: str, workflow: str | None = None) -> list[ShareRecord]:
        """What ``namespace`` shares (of ``workflow``, if given), and with whom."""
        query = select(workflow_shares).where(workflow_shares.c.namespace == namespace)
        if workflow is not None:
            query = query.where(workflow_shares.c.workflow == workflow)
        order = (workflow_shares.c.workflow, workflow_shares.c.grantee, workflow_shares.c.version)
        return [ShareRecord.of(row) for row in self.connection.execute(query.order_by(*order))]


def _named(namespace: str, name: str) -> ColumnElement[bool]:
    return and_(workflows.c.namespace == namespace, workflows.c.name == name)


__all__ = [
    "EVERY_VERSION",
    "DefinitionsTx",
    "ListedWorkflow",
    "ShareRecord",
    "VisibleWorkflow",
    "visible_to",
]
