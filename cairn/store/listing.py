"""Listing a namespace's runs: keyset pages and counts by status that cost the same at
ten thousand runs as at a million.

Every filter a page takes has an index in the page's order (namespace, [workflow,]
[status,] created_at, id — migrations 0008 and 0024), so a page reads its own rows and
no others. Several statuses are a page of each status, merged (an ``IN`` list would
read the namespace's runs in created_at order until a page of them matched). A count
reads at most ``cap + 1`` index entries per status: exact up to the cap, "more than the
cap" beyond it — an exact ``count(*)`` grows with the table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import ColumnElement, Select, func, select, tuple_, union_all

from cairn.model.selection import RunFilter
from cairn.model.statuses import RUN_TERMINAL, RunStatus
from cairn.store.base import TxBase
from cairn.store.records import ListedRun, from_epoch, to_epoch
from cairn.store.schema import runs

LISTED = (
    runs.c.id,
    runs.c.workflow,
    runs.c.version,
    runs.c.status,
    runs.c.request_id,
    runs.c.current,
    runs.c.reason,
    runs.c.last_seq,
    runs.c.created_at,
    runs.c.updated_at,
)


IN_FLIGHT = tuple(status for status in RunStatus if status not in RUN_TERMINAL)


@dataclass(frozen=True, slots=True)
class AnsweringRun:
    """A run in flight and its answers to ``ctx.patched`` (patch id -> answer; None:
    its state is too large to be cached on its row — restore it to know)."""

    id: str
    version: int
    status: RunStatus
    created_at: float
    patches: dict[str, bool] | None


class ListingTx(TxBase):
    def patch_answers(
        self, namespace: str, workflow: str, version: int | None = None
    ) -> list[AnsweringRun]:
        """Every run of ``workflow`` (of ``version``, or any) in ``namespace`` that has
        not ended, oldest first, with the answers its cached state holds: only that part
        of the state is read."""
        cached = runs.c.state
        query = (
            select(
                runs.c.id,
                runs.c.version,
                runs.c.status,
                runs.c.created_at,
                cached["patches"].label("patches"),
                # Every cached state has its run id; a state too large to cache is SQL
                # NULL or JSON null, depending on the path that wrote the row.
                cached["run_id"].as_string().is_(None).label("uncached"),
            )
            .where(*listing_where(namespace, RunFilter(IN_FLIGHT, workflow, version)))
            .order_by(runs.c.created_at, runs.c.id)
        )
        return [
            AnsweringRun(
                row.id,
                row.version,
                RunStatus(row.status),
                to_epoch(row.created_at),
                None if row.uncached else {str(k): bool(v) for k, v in (row.patches or {}).items()},
            )
            for row in self.connection.execute(query)
        ]

    def runs_page(
        self,
        namespace: str,
        selection: RunFilter | None = None,
        *,
        limit: int = 50,
        before: tuple[datetime, str] | None = None,
    ) -> list[ListedRun]:
        """A page of a namespace's runs ``selection`` selects, newest first,
        keyset-paginated on (created_at, id): the page after ``before`` stays the same
        while new runs arrive (an offset would shift)."""
        selection = selection or RunFilter()
        if len(selection.statuses) <= 1:
            query = page_query(namespace, selection, limit, before)
        else:
            each = [
                select(page_query(namespace, one, limit, before).subquery())
                for one in _by_status(selection)
            ]
            merged = union_all(*each).subquery()
            order = (merged.c.created_at.desc(), merged.c.id.desc())
            query = select(merged).order_by(*order).limit(limit)
        return [ListedRun.of(row) for row in self.connection.execute(query)]

    def run_counts(
        self, namespace: str, selection: RunFilter | None = None, *, cap: int
    ) -> dict[RunStatus, int]:
        """How many of a namespace's runs ``selection`` selects, by status (those it
        names, or all): each count exact up to ``cap``, and ``cap + 1`` for more."""
        selection = selection or RunFilter()
        statuses = selection.statuses or tuple(RunStatus)
        counted = []
        for one in _by_status(replace(selection, statuses=statuses)):
            capped = (
                select(runs.c.id).where(*listing_where(namespace, one)).limit(cap + 1).subquery()
            )
            counted.append(select(func.count()).select_from(capped).scalar_subquery())
        row = self.connection.execute(select(*counted)).one()
        return {status: int(count) for status, count in zip(statuses, row, strict=True)}


def page_query(
    namespace: str, selection: RunFilter, limit: int, before: tuple[datetime, str] | None
) -> Select[tuple[object, ...]]:
    """One page's query: a range of one index, in its order."""
    query = select(*LISTED).where(*listing_where(namespace, selection))
    if before is not None:
        # A row comparison, not its expansion with OR: the index starts right there.
        query = query.where(tuple_(runs.c.created_at, runs.c.id) < tuple_(*before))
    return query.order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(limit)


def _by_status(selection: RunFilter) -> list[RunFilter]:
    """The filter once per status it names: each one read through the status's index."""
    return [replace(selection, statuses=(status,)) for status in selection.statuses]


def listing_where(namespace: str, selection: RunFilter) -> list[ColumnElement[bool]]:
    """The conditions that select a filter's runs of a namespace."""
    clauses: list[ColumnElement[bool]] = [runs.c.namespace == namespace]
    if selection.statuses:
        clauses.append(runs.c.status.in_([status.value for status in selection.statuses]))
    if selection.workflow is not None:
        clauses.append(runs.c.workflow == selection.workflow)
    if selection.version is not None:
        clauses.append(runs.c.version == selection.version)
    if selection.created_after is not None:
        clauses.append(runs.c.created_at > from_epoch(selection.created_after))
    if selection.created_before is not None:
        clauses.append(runs.c.created_at < from_epoch(selection.created_before))
    if selection.ids:
        clauses.append(runs.c.id.in_(selection.ids))
    return clauses
