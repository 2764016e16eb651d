"""``cairn shares``: which of a namespace's workflows another namespace may see and start
(docs/access.md#namespaces) — through the HTTP API in remote mode, as the key's principal
and in its namespace (:mod:`cairn.cli.remote`), else on the database as ``db:<user>``;
each change an audit entry of the owning namespace."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cairn.cli import remote
from cairn.cli._app import app, out

shares_app = typer.Typer(
    help="Share a namespace's workflows with other namespaces (docs/access.md).",
    no_args_is_help=True,
)
app.add_typer(shares_app, name="shares")

OwnerOption = Annotated[
    str, typer.Option(help="The namespace that owns the workflow (remote: the key's).")
]
GranteeOption = Annotated[
    str, typer.Option("--with", help="The namespace it is shared with.", show_default=False)
]
VersionOption = Annotated[
    int | None,
    typer.Option(min=1, help="One version (default: every version, and those to come)."),
]


@shares_app.command("add")
def add_share(
    workflow: Annotated[str, typer.Argument(help="A workflow of the owning namespace.")],
    *,
    grantee: GranteeOption,
    namespace: OwnerOption = "default",
    version: VersionOption = None,
) -> None:
    """Let another namespace see and start a workflow: its runs are that namespace's and
    execute this namespace's definition."""
    remote.key_namespace(namespace)
    which = "every version" if version is None else f"version {version}"
    if remote.active():
        with remote.api() as api:
            view = api.share(workflow, grantee, version)
        out.print(f"{view.namespace}/{workflow} ({which}) shared with {grantee}")
        return
    from cairn.client import Client
    from cairn.engine.sharing import Sharing

    client = Client()
    try:
        with client.audited("definitions.share", namespace, workflow):
            _share, created = Sharing(client.runtime.store).share(
                namespace, workflow, grantee, version, by=client.actor
            )
    finally:
        client.close()
    state = "shared" if created else "shared already"
    out.print(f"{namespace}/{workflow} ({which}) {state} with {grantee}")


@shares_app.command("revoke")
def revoke_share(
    workflow: Annotated[str, typer.Argument(help="A workflow of the owning namespace.")],
    *,
    grantee: GranteeOption,
    namespace: OwnerOption = "default",
    version: VersionOption = None,
) -> None:
    """Take a share back: the namespace can no longer see or start the workflow (its
    runs started already go on)."""
    remote.key_namespace(namespace)
    which = "every version" if version is None else f"version {version}"
    if remote.active():
        with remote.api() as api:
            api.unshare(workflow, grantee, version)
        out.print(f"{workflow} ({which}) no longer shared with {grantee}")
        return
    from cairn.client import Client
    from cairn.engine.sharing import Sharing

    client = Client()
    try:
        with client.audited("definitions.unshare", namespace, workflow):
            Sharing(client.runtime.store).revoke(namespace, workflow, grantee, version)
    finally:
        client.close()
    out.print(f"{namespace}/{workflow} ({which}) no longer shared with {grantee}")


@shares_app.command("list")
def list_shares(
    namespace: OwnerOption = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What a namespace shares, and with whom."""
    remote.key_namespace(namespace)
    if remote.active():
        with remote.api() as api:
            shares = [view.model_dump() for view in api.shares().shares]
    else:
        from cairn.client import Client
        from cairn.engine.sharing import Sharing

        client = Client()
        try:
            shares = [dict(s.__dict__) for s in Sharing(client.runtime.store).shares(namespace)]
        finally:
            client.close()
    if as_json:
        print(json.dumps(shares))
        return
    if not shares:
        out.print("no workflow is shared")
    for share in shares:
        which = "every version" if share["version"] is None else f"version {share['version']}"
        out.print(
            f"{share['workflow']} ({which}) with {share['grantee']}  by {share['created_by']}"
        )
