"""The requests of a namespace's administration, written once as :mod:`cairn.http.calls`
writes the others: its cron schedules, its pauses, its principals and API keys, its audit
log.

Each function is also a method of both clients, which bind them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from cairn.http.calls import Call, present
from cairn.http.models import (
    AuditPage,
    BackfillResult,
    KeyList,
    MintedKeyView,
    Paused,
    PauseList,
    PrincipalView,
    Registered,
    Resumed,
    ScheduleList,
    ScheduleView,
    ShareList,
    ShareView,
    VersionList,
    WorkflowDetail,
)


def _schedule(name: str) -> str:
    return f"/v1/schedules/{quote(name, safe='')}"


def add_schedule(spec: Mapping[str, Any]) -> Call[ScheduleView]:
    """Add a schedule: ``{"name", "workflow", "cron", "version"?, "timezone"?, "input"?,
    "overlap"?, "catch_up"?, "jitter"?, "paused"?}``."""
    return Call("POST", "/v1/schedules", ScheduleView.model_validate, body=dict(spec))


def schedules() -> Call[ScheduleList]:
    """The namespace's schedules, by name."""
    return Call("GET", "/v1/schedules", ScheduleList.model_validate)


def schedule(name: str) -> Call[ScheduleView]:
    """A schedule, and the runs its ticks started lately."""
    return Call("GET", _schedule(name), ScheduleView.model_validate)


def pause_schedule(name: str) -> Call[ScheduleView]:
    """Stop ticking (ticks while paused are not started, then or later)."""
    return Call("POST", f"{_schedule(name)}/pause", ScheduleView.model_validate)


def resume_schedule(name: str) -> Call[ScheduleView]:
    """Tick again, from now."""
    return Call("POST", f"{_schedule(name)}/resume", ScheduleView.model_validate)


def delete_schedule(name: str) -> Call[None]:
    """Delete a schedule; the runs it started go on."""
    return Call("DELETE", _schedule(name), _nothing)


def backfill_schedule(name: str, start: float, end: float) -> Call[BackfillResult]:
    """Start a run for every tick in [start, end) (epoch seconds), now."""
    body = {"start": start, "end": end}
    return Call("POST", f"{_schedule(name)}/backfill", BackfillResult.model_validate, body=body)


# -- principals and keys --------------------------------------------------------------------


def register(spec: Mapping[str, Any]) -> Call[Registered]:
    """Register a definition (as a .json file holds it) into the key's namespace, with the
    schedules it declares; a changed definition under a registered version is refused."""
    return Call("POST", "/v1/workflows", Registered.model_validate, body=dict(spec))


def workflow(name: str, version: int | None = None) -> Call[WorkflowDetail]:
    """One definition as registered: the newest version the key may see, or ``version``."""
    return Call(
        "GET",
        f"/v1/workflows/{quote(name, safe='')}",
        WorkflowDetail.model_validate,
        params=present(version=version),
    )


def versions(workflow: str | None = None) -> Call[VersionList]:
    """Per workflow (``workflow`` only, if given), each version with its runs in flight,
    how many of them wait and since when the oldest: what draining a version watches."""
    params = present(workflow=workflow)
    return Call("GET", "/v1/versions", VersionList.model_validate, params=params)


def share(workflow: str, grantee: str, version: int | None = None) -> Call[ShareView]:
    """Let namespace ``grantee`` see and start a workflow of the key's namespace (every
    version, or ``version``)."""
    body = {"namespace": grantee, **present(version=version)}
    path = f"/v1/workflows/{quote(workflow, safe='')}/shares"
    return Call("POST", path, ShareView.model_validate, body=body)


def shares() -> Call[ShareList]:
    """Every share of the key's namespace's workflows."""
    return Call("GET", "/v1/shares", ShareList.model_validate)


def unshare(workflow: str, grantee: str, version: int | None = None) -> Call[None]:
    """Take a share back (of every version, or of ``version``)."""
    path = f"/v1/workflows/{quote(workflow, safe='')}/shares/{quote(grantee, safe='')}"
    return Call("DELETE", path, _nothing, params=present(version=version))


def _pause(kind: str, name: str) -> str:
    return f"/v1/pauses/{quote(kind, safe='')}/{quote(name, safe='')}"


def pause(kind: str, name: str, reason: str) -> Call[Paused]:
    """Pause a workflow's new starts (``kind="workflow"``) or a queue (``"queue"``)."""
    return Call("POST", _pause(kind, name), Paused.model_validate, body={"reason": reason})


def resume(kind: str, name: str) -> Call[Resumed]:
    """Lift a pause; a workflow's held runs start."""
    return Call("POST", f"{_pause(kind, name)}/resume", Resumed.model_validate)


def pauses() -> Call[PauseList]:
    """What the namespace has paused, with the runs each workflow holds."""
    return Call("GET", "/v1/pauses", PauseList.model_validate)


def create_principal(name: str, role: str, payloads: bool = False) -> Call[PrincipalView]:
    """A new principal of the key's namespace (409 ``principal_exists`` if taken)."""
    body = {"name": name, "role": role, "payloads": payloads}
    return Call("POST", "/v1/principals", PrincipalView.model_validate, body=body)


def mint_key(principal: str, expires_in_s: float | None = None) -> Call[MintedKeyView]:
    """A new API key for ``principal``: its whole text is in this answer only."""
    path = f"/v1/principals/{quote(principal, safe='')}/keys"
    body = present(expires_in_s=expires_in_s)
    return Call("POST", path, MintedKeyView.model_validate, body=body)


def keys() -> Call[KeyList]:
    """The namespace's principals and their keys (ids, never secrets)."""
    return Call("GET", "/v1/keys", KeyList.model_validate)


def rotate_key(key_id: str, grace_s: float = 0.0) -> Call[MintedKeyView]:
    """A new key for the key's principal; this one works ``grace_s`` more."""
    path = f"/v1/keys/{quote(key_id, safe='')}/rotate"
    return Call("POST", path, MintedKeyView.model_validate, body={"grace_s": grace_s})


def revoke_key(key_id: str) -> Call[None]:
    """The key stops working."""
    return Call("DELETE", f"/v1/keys/{quote(key_id, safe='')}", _nothing)


def audit_page(
    *,
    after: int = 0,
    limit: int = 100,
    since: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    outcome: str | None = None,
) -> Call[AuditPage]:
    """A page of the namespace's audit log, oldest first (``since``: ISO 8601)."""
    params = present(
        after=after, limit=limit, since=since, actor=actor, action=action, outcome=outcome
    )
    return Call("GET", "/v1/audit", AuditPage.model_validate, params=params)


def _nothing(_body: Any) -> None:
    return None
