"""What the API answers, in the shapes direct mode's commands print: remote mode feeds
the commands' renderers the very data they render from the database, so that one run
reads the same either way.

Light: nothing of the engine or the store, so remote mode loads neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.http import Client, RunDetail
    from cairn.timetravel.steps import Step

# RunView.to_dict()'s fields, in its order (cairn status --json, cairn fork --live --json).
RUN_VIEW_FIELDS = (
    "id",
    "workflow",
    "version",
    "status",
    "namespace",
    "request_id",
    "current",
    "reason",
    "last_seq",
    "created_at",
    "updated_at",
    "executions",
    "parent_run_id",
    "fork_seq",
    "priority",
    "workflow_namespace",
    "build",
    "waiting_for_build",
)


def run_view(detail: RunDetail) -> dict[str, Any]:
    """The run as ``RunView.to_dict()`` has it (its vars null without the payloads
    permission, as the API shows them)."""
    shown = {name: getattr(detail, name) for name in RUN_VIEW_FIELDS}
    shown.update(vars=detail.vars, visits=detail.visits, nodes=detail.nodes)
    return shown


def all_events(client: Client, run_id: str, after: int = 0) -> list[dict[str, Any]]:
    """The run's events after seq ``after``, every page of them."""
    found: list[dict[str, Any]] = []
    while True:
        page = client.events(run_id, after=after)
        found += page.events
        if not page.events or page.next_after <= after:
            return found
        after = page.next_after


def heartbeat_interval_s(detail: RunDetail) -> float:
    """How often the deployment's workers beat, as its API says (a running node is
    suspect after three missed beats); this process's settings for an API too old to
    say."""
    if detail.heartbeat_interval_s is not None:
        return detail.heartbeat_interval_s
    from cairn.config import Settings

    return Settings.from_env().heartbeat_interval


def step_of(shown: dict[str, Any]) -> Step:
    """A :class:`~cairn.timetravel.steps.Step` again, from its JSON form (``error``
    absent: the API hid it without the payloads permission)."""
    from cairn.timetravel.steps import Step

    fields = {name: shown[name] for name in Step.__dataclass_fields__ if name in shown}
    fields["marks"], fields["notes"] = tuple(shown["marks"]), tuple(shown["notes"])
    return Step(**fields)
