"""Which runs a listing shows or a bulk action acts on: a filter over a namespace's runs.

A listing pages with a :func:`page_cursor`: the position after the last run shown, the
same in the API (``?cursor=``) and the CLI (``cairn runs --before``), so a cursor one
printed works in the other.

A bulk action is asked twice — a dry run that counts what the filter selects, then the
action — and must act on exactly the runs the person saw counted. The dry run answers a
:func:`selection_token` of the ids it selected; the action, given that token, selects
again and refuses (nothing done) if the set is not the same one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from cairn.errors import InvalidInput
from cairn.model.statuses import RunStatus


@dataclass(frozen=True)
class RunFilter:
    """Runs of one namespace; every field given narrows (none given: all its runs)."""

    statuses: tuple[RunStatus, ...] = ()
    workflow: str | None = None
    version: int | None = None
    created_after: float | None = None  # epoch seconds, exclusive
    created_before: float | None = None  # epoch seconds, exclusive
    ids: tuple[str, ...] = field(default=())

    @property
    def narrowed(self) -> bool:
        """Whether any field narrows it (a bulk action on every run must say so)."""
        return any(
            value not in (None, ())
            for value in (
                self.statuses,
                self.workflow,
                self.version,
                self.created_after,
                self.created_before,
                self.ids,
            )
        )


def selection_token(run_ids: Iterable[str]) -> str:
    """A short fingerprint of a set of run ids: the same set, the same token."""
    digest = hashlib.sha256("\n".join(sorted(set(run_ids))).encode()).hexdigest()
    return f"sel_{digest[:32]}"


def page_cursor(created_at: datetime, run_id: str) -> str:
    """The cursor of the page after the run (``created_at``, ``run_id``): opaque to its
    readers, URL-safe."""
    raw = json.dumps([created_at.isoformat(), run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_position(cursor: str) -> tuple[datetime, str]:
    """Where a :func:`page_cursor` points; :class:`InvalidInput` if it is not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, run_id = json.loads(raw)
        return datetime.fromisoformat(created), str(run_id)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidInput("cursor: not a cursor a listing of runs returned") from exc
