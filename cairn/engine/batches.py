"""Submitting runs in batches: what one item asks for and what became of it.

Other services enqueue work in bulk (the HTTP API's ``POST /v1/runs:batch``, the Celery
task ``cairn.submit_batch``): up to :data:`MAX_BATCH` runs in one transaction, each
item answered on its own — a bad item is refused with its error, the others start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_BATCH = 1000


@dataclass(frozen=True)
class SubmitItem:
    workflow: str
    input: Mapping[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    version: int | None = None
    webhook: str | None = None
    priority: int | None = None  # -5..5 (None: 0), checked when the batch is submitted

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubmitItem:
        return cls(
            workflow=data["workflow"],
            input=data.get("input") or {},
            request_id=data.get("request_id"),
            version=data.get("version"),
            webhook=data.get("webhook"),
            priority=data.get("priority"),
        )


@dataclass(frozen=True)
class Submitted:
    """One item's answer: the run it started (or the one its request id already had),
    or why it was refused."""

    index: int
    run_id: str | None = None
    created: bool = False
    error_code: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.run_id is not None

    def to_dict(self) -> dict[str, Any]:
        if self.run_id is not None:
            return {"index": self.index, "run_id": self.run_id, "created": self.created}
        return {"index": self.index, "error": {"code": self.error_code, "message": self.error}}
