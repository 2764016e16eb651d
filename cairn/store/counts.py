"""How many of a namespace's runs each status holds, under a filter: the console's
runs page shows them beside the list (the list itself is ``runs_page``'s keyset)."""

from __future__ import annotations

from sqlalchemy import func, select

from cairn.model.selection import RunFilter
from cairn.store.base import TxBase
from cairn.store.runs import _selected
from cairn.store.schema import runs


class CountsTx(TxBase):
    def run_counts(self, namespace: str, selection: RunFilter | None = None) -> dict[str, int]:
        """Per status, the namespace's runs ``selection`` selects (its statuses aside:
        the counts are what a status filter would choose among)."""
        chosen = selection or RunFilter()
        unfiltered = RunFilter(
            workflow=chosen.workflow,
            version=chosen.version,
            created_after=chosen.created_after,
            created_before=chosen.created_before,
            ids=chosen.ids,
        )
        rows = self.connection.execute(
            select(runs.c.status, func.count())
            .where(runs.c.namespace == namespace, *_selected(unfiltered))
            .group_by(runs.c.status)
        )
        return {str(status): int(count) for status, count in rows}
