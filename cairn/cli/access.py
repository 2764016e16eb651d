"""Commands for who may do what: ``cairn keys`` (principals and their API keys) and
``cairn audit`` (the audit log). In direct mode they write to the database as
``db:<user>`` (see docs/access.md), each change itself an audit entry; in remote mode
(:mod:`cairn.cli.remote`) they ask the API, as an admin key of its namespace."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, out
from cairn.errors import InvalidInput

if TYPE_CHECKING:
    from cairn.model.principals import Role

keys_app = typer.Typer(help="Principals and their API keys (docs/access.md).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

NamespaceOption = Annotated[str, typer.Option(help="The principals' namespace.")]
_SPAN = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
AUDIT_PAGE = 1000  # the API's largest page


def _span(text: str | None, option: str) -> timedelta | None:
    """``30d``, ``12h``, ``90m``, ``45s`` (None: not given)."""
    if text is None:
        return None
    found = _SPAN.fullmatch(text.strip())
    if found is None:
        raise InvalidInput(f"{option} is a number and s, m, h or d (90d), not {text!r}")
    return timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])


@keys_app.command("create")
def create_key(
    name: Annotated[str, typer.Argument(help="The principal's name (it is made if new).")],
    *,
    role: Annotated[str, typer.Option(help="viewer, approver, operator or admin.")] = "viewer",
    payloads: Annotated[
        bool, typer.Option("--payloads", help="It may read payloads (input, state, messages).")
    ] = False,
    expires: Annotated[str | None, typer.Option(help="It stops working after this (90d).")] = None,
    namespace: NamespaceOption = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Mint an API key for a principal (made first, with --role and --payloads, if the
    namespace has none of that name). The key is printed once: keep it."""
    from cairn.model.principals import Role

    try:
        wanted = Role(role)
    except ValueError as exc:
        raise InvalidInput(f"--role is viewer, approver, operator or admin, not {role!r}") from exc
    expiry = _span(expires, "--expires")
    if remote.active():
        remote.key_namespace(namespace)
        minted = _minted_over_http(name, role, payloads=payloads, expires=expiry)
    else:
        minted = _minted(namespace, name, wanted, payloads=payloads, expires=expiry)
    if as_json:
        print(json.dumps(minted))
        return
    out.print(
        f"key {minted['key_id']} for {minted['namespace']}/{name} ({minted['role']}):",
        markup=False,
    )
    out.print(minted["key"], markup=False, soft_wrap=True)
    out.print("shown this once: cairn keeps only its digest", markup=False)


def _refused_as(namespace: str, name: str, role: str, payloads: bool) -> InvalidInput:
    return InvalidInput(
        f"{namespace}/{name} is a {role}"
        + (" that may read payloads" if payloads else "")
        + ": a key is minted for the principal as it is (leave --role and --payloads "
        "as they are, or use another name)"
    )


def _minted_over_http(
    name: str, role: str, *, payloads: bool, expires: timedelta | None
) -> dict[str, Any]:
    with remote.api() as api:
        known = {found.name: found for found in api.keys().principals}.get(name)
        if known is None:
            api.create_principal(name, role, payloads)
        elif (known.role, known.payloads) != (role, payloads):
            raise _refused_as("the key's namespace", name, known.role, known.payloads)
        seconds = expires.total_seconds() if expires is not None else None
        return api.mint_key(name, seconds).model_dump()


def _minted(
    namespace: str, name: str, wanted: Role, *, payloads: bool, expires: timedelta | None
) -> dict[str, Any]:
    from cairn.access import KeyManager
    from cairn.client import Client

    client = Client()
    try:
        manager = KeyManager(client.runtime.store)
        with client.runtime.store.reading() as tx:
            known = tx.principal_named(namespace, name)
        if known is None:
            with client.audited("principal.create", namespace, name):
                manager.create_principal(
                    namespace, name, wanted, payloads=payloads, by=client.principal
                )
        elif (known.role, known.payloads) != (wanted.value, payloads):
            raise _refused_as(namespace, name, known.role, known.payloads)
        with client.audited("key.create", namespace, name):
            minted = manager.mint(namespace, name, expires_in=expires)
    finally:
        client.close()
    return dict(minted.__dict__)


@keys_app.command("list")
def list_keys(
    namespace: NamespaceOption = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The namespace's principals and their keys (ids, never secrets)."""
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            rows = [key.model_dump() for key in api.keys().keys]
    else:
        rows = _keys(namespace)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        state = "revoked" if row["revoked_at"] else "working"
        payload = ", payloads" if row["payloads"] else ""
        out.print(
            f"{row['key_id']}  {row['principal']} ({row['role']}{payload})  {state}", markup=False
        )


def _keys(namespace: str) -> list[dict[str, Any]]:
    from cairn.access import KeyManager
    from cairn.client import Client

    client = Client()
    try:
        records = KeyManager(client.runtime.store).keys(namespace)
    finally:
        client.close()
    return [
        {
            "key_id": r.id,
            "principal": r.principal.name,
            "role": r.principal.role,
            "payloads": r.principal.payloads,
            "created_at": r.created_at,
            "expires_at": r.expires_at,
            "revoked_at": r.revoked_at,
        }
        for r in records
    ]


@keys_app.command("rotate")
def rotate_key(
    key_id: Annotated[str, typer.Argument()],
    grace: Annotated[str, typer.Option(help="How long the old key keeps working.")] = "0s",
    namespace: NamespaceOption = "default",
) -> None:
    """A new key for the key's principal; the old one stops after --grace."""
    after = _span(grace, "--grace") or timedelta(0)
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            minted = api.rotate_key(key_id, after.total_seconds()).model_dump()
    else:
        minted = _rotated(namespace, key_id, after)
    out.print(
        f"key {minted['key_id']} for {minted['namespace']}/{minted['principal']}:", markup=False
    )
    out.print(minted["key"], markup=False, soft_wrap=True)


def _rotated(namespace: str, key_id: str, grace: timedelta) -> dict[str, Any]:
    from cairn.access import KeyManager
    from cairn.client import Client

    client = Client()
    try:
        with client.audited("key.rotate", namespace, key_id):
            minted = KeyManager(client.runtime.store).rotate(namespace, key_id, grace=grace)
    finally:
        client.close()
    return dict(minted.__dict__)


@keys_app.command("revoke")
def revoke_key(
    key_id: Annotated[str, typer.Argument()], namespace: NamespaceOption = "default"
) -> None:
    """The key stops working (every API process within CAIRN_API_KEY_CACHE_S)."""
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            api.revoke_key(key_id)
    else:
        from cairn.access import KeyManager
        from cairn.client import Client

        client = Client()
        try:
            with client.audited("key.revoke", namespace, key_id):
                KeyManager(client.runtime.store).revoke(namespace, key_id)
        finally:
            client.close()
    out.print(f"key {key_id} revoked", markup=False)


@app.command("audit")
def audit_log(
    *,
    namespace: NamespaceOption = "default",
    since: Annotated[str | None, typer.Option(help="From this date or time (ISO 8601).")] = None,
    actor: Annotated[str | None, typer.Option(help="Only this actor (key:ci-bot).")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action (run.cancel).")] = None,
    outcome: Annotated[str | None, typer.Option(help="ok, refused or failed.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many entries.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines (to export).")] = False,
) -> None:
    """The namespace's audit log, oldest first: who did what, on what, from where, how it
    ended — refusals included."""
    filters = {
        name: value
        for name, value in (("actor", actor), ("action", action), ("outcome", outcome))
        if value is not None
    }
    start = _moment(since) if since is not None else None
    if remote.active():
        remote.key_namespace(namespace)
        entries = _entries_over_http(limit, start, filters)
    else:
        entries = _entries(namespace, limit, start, filters)
    for entry in entries:
        if as_json:
            print(json.dumps(entry, separators=(",", ":")))
            continue
        when = datetime.fromtimestamp(entry["at"], UTC).isoformat(timespec="seconds")
        target = f" {entry['target']}" if entry["target"] else ""
        out.print(
            f"{when}  {entry['outcome']:<7} {entry['actor']}  {entry['action']}{target}  "
            f"({entry['source']})",
            markup=False,
        )


def _entries(
    namespace: str, limit: int, start: datetime | None, filters: dict[str, str]
) -> list[dict[str, Any]]:
    from cairn.client import Client

    client = Client()
    try:
        with client.runtime.store.reading() as tx:
            entries = tx.audit_entries(namespace, limit=limit, since=start, filters=filters)
    finally:
        client.close()
    return [entry.to_dict() for entry in entries]


def _entries_over_http(
    limit: int, start: datetime | None, filters: dict[str, str]
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after = 0
    since = start.isoformat() if start is not None else None
    with remote.api() as api:
        while len(found) < limit:
            wanted = min(limit - len(found), AUDIT_PAGE)
            page = api.audit_page(after=after, limit=wanted, since=since, **filters)
            found += page.entries
            if len(page.entries) < wanted:
                break
            after = page.next_after
    return found


def _moment(text: str) -> datetime:
    try:
        found = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(f"--since is a date or a time (ISO 8601), not {text!r}") from exc
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)
