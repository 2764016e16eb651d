"""Commands for who may do what: ``cairn keys`` (principals and their API keys) and
``cairn audit`` (the audit log). They write to the database directly, as ``db:<user>``
(see docs/access.md), each change itself an audit entry."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from cairn.cli._app import app, out
from cairn.errors import InvalidInput

keys_app = typer.Typer(help="Principals and their API keys (docs/access.md).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

NamespaceOption = Annotated[str, typer.Option(help="The principals' namespace.")]
_SPAN = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


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
    from cairn.access import KeyManager
    from cairn.client import Client
    from cairn.model.principals import Role

    try:
        wanted = Role(role)
    except ValueError as exc:
        raise InvalidInput(f"--role is viewer, approver, operator or admin, not {role!r}") from exc
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
            raise InvalidInput(
                f"{namespace}/{name} is a {known.role}"
                + (" that may read payloads" if known.payloads else "")
                + ": a key is minted for the principal as it is (leave --role and --payloads "
                "as they are, or use another name)"
            )
        with client.audited("key.create", namespace, name):
            minted = manager.mint(namespace, name, expires_in=_span(expires, "--expires"))
    finally:
        client.close()
    if as_json:
        print(json.dumps(minted.__dict__))
        return
    out.print(f"key {minted.key_id} for {namespace}/{name} ({minted.role}):", markup=False)
    out.print(minted.key, markup=False, soft_wrap=True)
    out.print("shown this once: cairn keeps only its digest", markup=False)


@keys_app.command("list")
def list_keys(
    namespace: NamespaceOption = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The namespace's principals and their keys (ids, never secrets)."""
    from cairn.access import KeyManager
    from cairn.client import Client

    client = Client()
    try:
        records = KeyManager(client.runtime.store).keys(namespace)
    finally:
        client.close()
    rows = [
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
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        state = "revoked" if row["revoked_at"] else "working"
        payload = ", payloads" if row["payloads"] else ""
        out.print(
            f"{row['key_id']}  {row['principal']} ({row['role']}{payload})  {state}", markup=False
        )


@keys_app.command("rotate")
def rotate_key(
    key_id: Annotated[str, typer.Argument()],
    grace: Annotated[str, typer.Option(help="How long the old key keeps working.")] = "0s",
    namespace: NamespaceOption = "default",
) -> None:
    """A new key for the key's principal; the old one stops after --grace."""
    from cairn.access import KeyManager
    from cairn.client import Client

    client = Client()
    try:
        with client.audited("key.rotate", namespace, key_id):
            minted = KeyManager(client.runtime.store).rotate(
                namespace, key_id, grace=_span(grace, "--grace") or timedelta(0)
            )
    finally:
        client.close()
    out.print(f"key {minted.key_id} for {namespace}/{minted.principal}:", markup=False)
    out.print(minted.key, markup=False, soft_wrap=True)


@keys_app.command("revoke")
def revoke_key(
    key_id: Annotated[str, typer.Argument()], namespace: NamespaceOption = "default"
) -> None:
    """The key stops working (every API process within CAIRN_API_KEY_CACHE_S)."""
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
    from cairn.client import Client

    filters = {
        name: value
        for name, value in (("actor", actor), ("action", action), ("outcome", outcome))
        if value is not None
    }
    start = _moment(since) if since is not None else None
    client = Client()
    try:
        with client.runtime.store.reading() as tx:
            entries = tx.audit_entries(namespace, limit=limit, since=start, filters=filters)
    finally:
        client.close()
    for entry in entries:
        if as_json:
            print(json.dumps(entry.to_dict(), separators=(",", ":")))
            continue
        when = datetime.fromtimestamp(entry.at, UTC).isoformat(timespec="seconds")
        target = f" {entry.target}" if entry.target else ""
        out.print(
            f"{when}  {entry.outcome:<7} {entry.actor}  {entry.action}{target}  ({entry.source})",
            markup=False,
        )


def _moment(text: str) -> datetime:
    try:
        found = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(f"--since is a date or a time (ISO 8601), not {text!r}") from exc
    return found if found.tzinfo is not None else found.replace(tzinfo=UTC)
