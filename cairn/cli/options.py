"""Which runs a command selects, as its options say: the filters ``cairn runs`` lists by
and ``cairn bulk`` acts on, read once into a :class:`RunSelection` that either mode
sends on (a store filter, or the API's query and body)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.errors import InvalidInput

if TYPE_CHECKING:
    from cairn.model.selection import RunFilter

StatusOption = Annotated[
    list[str] | None,
    typer.Option(
        "--status",
        help="Only runs in this status (repeatable): pending, running, waiting, "
        "succeeded, failed, cancelling, cancelled, ...",
    ),
]
WorkflowOption = Annotated[str | None, typer.Option(help="Only runs of this workflow.")]
VersionOption = Annotated[
    int | None, typer.Option(min=1, help="Only runs of this version of the workflow.")
]
CreatedAfterOption = Annotated[
    str | None,
    typer.Option(
        "--created-after", help="Created after this time: ISO 8601 (UTC if no zone) or epoch s."
    ),
]
CreatedBeforeOption = Annotated[
    str | None, typer.Option("--created-before", help="Created before this time (as above).")
]


@dataclass(frozen=True)
class RunSelection:
    """Runs of one namespace; every field given narrows."""

    statuses: tuple[str, ...] = ()
    workflow: str | None = None
    version: int | None = None
    created_after: float | None = None
    created_before: float | None = None
    ids: tuple[str, ...] = ()

    @classmethod
    def of(  # noqa: PLR0917 - the options as typer gives them
        cls,
        statuses: list[str] | None,
        workflow: str | None,
        version: int | None,
        created_after: str | None,
        created_before: str | None,
        ids: list[str] | None = None,
    ) -> RunSelection:
        selection = cls(
            statuses=tuple(dict.fromkeys(_status(value) for value in statuses or ())),
            workflow=workflow,
            version=version,
            created_after=instant(created_after, "--created-after") if created_after else None,
            created_before=instant(created_before, "--created-before") if created_before else None,
            ids=tuple(dict.fromkeys(ids or ())),
        )
        after, before = selection.created_after, selection.created_before
        if after is not None and before is not None and after >= before:
            raise InvalidInput("--created-after must be before --created-before")
        return selection

    def to_filter(self) -> RunFilter:
        """The store's filter (direct mode)."""
        from cairn.model.selection import RunFilter
        from cairn.model.statuses import RunStatus

        return RunFilter(
            statuses=tuple(RunStatus(value) for value in self.statuses),
            workflow=self.workflow,
            version=self.version,
            created_after=self.created_after,
            created_before=self.created_before,
            ids=self.ids,
        )

    def query(self) -> dict[str, Any]:
        """``GET /v1/runs``'s filters, as the HTTP client takes them."""
        return {
            "status": list(self.statuses) or None,
            "workflow": self.workflow,
            "version": self.version,
            "created_after": self.created_after,
            "created_before": self.created_before,
        }

    def body(self) -> dict[str, Any]:
        """A bulk action's ``filter``."""
        shown = {**self.query(), "ids": list(self.ids) or None}
        return {name: value for name, value in shown.items() if value is not None}


def _status(value: str) -> str:
    from cairn.model.statuses import RunStatus

    try:
        return RunStatus(value).value
    except ValueError:
        known = ", ".join(status.value for status in RunStatus)
        raise InvalidInput(f"--status is one of {known}; not {value!r}") from None


def instant(text: str, option: str) -> float:
    """Epoch seconds of an ISO 8601 date or time (UTC if it names no zone), or of a
    number of epoch seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{option}: {text!r} is no ISO 8601 time nor epoch seconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
