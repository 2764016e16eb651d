"""What the fleet reports about itself, as stored: the definitions a worker could not
load (migration 0026). Declared on :class:`~cairn.store.schema.Base`, which imports this
module last."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import DateTime, Index, Integer, String, Table, Text
from sqlalchemy.orm import Mapped, mapped_column

from cairn.store.schema import Base


class CodeFaultRow(Base):
    """A worker that received a node of a workflow version whose handlers it cannot import
    (migration 0026): which worker, why, when first and last, how often. The run waits;
    the row says what to install or set, and goes once that worker loads the version."""

    __tablename__ = "code_faults"
    __table_args__ = (Index("ix_code_faults_last_at", "last_at"),)

    namespace: Mapped[str] = mapped_column(String(100), primary_key=True)
    workflow: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[str] = mapped_column(String(200), primary_key=True)
    fault: Mapped[str] = mapped_column(Text)
    count: Mapped[int] = mapped_column(Integer)
    first_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


code_faults = cast(Table, CodeFaultRow.__table__)
