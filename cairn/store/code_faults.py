"""The definitions a worker could not load (migration 0026): recorded by the worker that
met the fault, read by ``cairn status --fleet`` and the API, deleted once that worker
loads the version. Times are the database's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select

from cairn.store.base import TxBase
from cairn.store.records import from_epoch, to_epoch
from cairn.store.schema_fleet import code_faults

FAULT_MAX = 2000  # characters of the loader's message kept


@dataclass(frozen=True)
class CodeFaultRecord:
    namespace: str
    workflow: str
    version: int
    worker: str
    fault: str
    count: int
    first_at: float
    last_at: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class CodeFaultsTx(TxBase):
    """The code_faults table."""

    def record_code_fault(
        self, namespace: str, workflow: str, version: int, worker: str, *, fault: str, seen: int
    ) -> None:
        """``worker`` could not load ``workflow@version``, ``seen`` more times since it
        last said so: the row counts them and keeps the latest message."""
        now = from_epoch(self.now())
        row = {
            "namespace": namespace,
            "workflow": workflow,
            "version": version,
            "worker": worker,
            "fault": fault[:FAULT_MAX],
            "count": seen,
            "first_at": now,
            "last_at": now,
        }
        insert = self._insert(code_faults).values(**row)
        self.connection.execute(
            insert.on_conflict_do_update(
                index_elements=["namespace", "workflow", "version", "worker"],
                set_={
                    "fault": insert.excluded.fault,
                    "count": code_faults.c.count + insert.excluded.count,
                    "last_at": insert.excluded.last_at,
                },
            )
        )

    def clear_code_fault(self, namespace: str, workflow: str, version: int, worker: str) -> None:
        c = code_faults.c
        self.connection.execute(
            delete(code_faults).where(
                c.namespace == namespace,
                c.workflow == workflow,
                c.version == version,
                c.worker == worker,
            )
        )

    def code_faults(self, within_s: float, namespace: str | None = None) -> list[CodeFaultRecord]:
        """The faults seen in the last ``within_s`` seconds (of ``namespace``, or all),
        most recent first: a worker gone for longer says nothing about the code now."""
        c = code_faults.c
        query = select(code_faults).where(c.last_at >= from_epoch(self.now() - within_s))
        if namespace is not None:
            query = query.where(c.namespace == namespace)
        rows = self.connection.execute(query.order_by(c.last_at.desc())).mappings().all()
        return [
            CodeFaultRecord(
                row["namespace"],
                row["workflow"],
                int(row["version"]),
                row["worker"],
                row["fault"],
                int(row["count"]),  # a row's .count is the tuple's method
                to_epoch(row["first_at"]),
                to_epoch(row["last_at"]),
            )
            for row in rows
        ]
