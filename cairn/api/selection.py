"""A filter over a namespace's runs, as a request gives it: query parameters to list runs,
a body's ``filter`` for a bulk action. Both become one :class:`RunFilter`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import Field

from cairn.api.deps import storable
from cairn.api.models import MAX_INT, Instant, Request, Version, WorkflowName
from cairn.errors import InvalidInput
from cairn.model.selection import RunFilter
from cairn.model.statuses import RunStatus

MAX_IDS = 1000


def run_filter(
    status: Annotated[
        list[RunStatus] | None, Query(description="Only runs in these statuses (repeatable).")
    ] = None,
    workflow: Annotated[
        str | None, Query(min_length=1, max_length=200, description="Only this workflow.")
    ] = None,
    version: Annotated[int | None, Query(ge=1, le=MAX_INT)] = None,
    created_after: Annotated[
        float | None, Query(ge=0, le=32503680000, description="Epoch seconds, exclusive.")
    ] = None,
    created_before: Annotated[
        float | None, Query(ge=0, le=32503680000, description="Epoch seconds, exclusive.")
    ] = None,
) -> RunFilter:
    """A dependency: the filter the query string gives."""
    return _checked(
        RunFilter(
            statuses=tuple(dict.fromkeys(status or ())),
            workflow=storable(workflow, "workflow"),
            version=version,
            created_after=created_after,
            created_before=created_before,
        )
    )


class FilterBody(Request):
    """Which runs of the key's namespace: every field given narrows."""

    status: list[RunStatus] = Field(default_factory=list, max_length=len(RunStatus))
    workflow: WorkflowName | None = None
    version: Version | None = None
    created_after: Instant | None = Field(default=None, description="Epoch seconds, exclusive.")
    created_before: Instant | None = Field(default=None, description="Epoch seconds, exclusive.")
    ids: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=MAX_IDS, description="Only these runs."
    )

    def to_filter(self) -> RunFilter:
        return _checked(
            RunFilter(
                statuses=tuple(dict.fromkeys(self.status)),
                workflow=self.workflow,
                version=self.version,
                created_after=self.created_after,
                created_before=self.created_before,
                ids=tuple(dict.fromkeys(self.ids)),
            )
        )


def _checked(selection: RunFilter) -> RunFilter:
    after, before = selection.created_after, selection.created_before
    if after is not None and before is not None and after >= before:
        raise InvalidInput("created_after must be before created_before")
    return selection
