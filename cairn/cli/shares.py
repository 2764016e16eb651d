"""``cairn shares``: which of a namespace's workflows another namespace may see and start
(docs/access.md#namespaces). They write to the database directly, as ``db:<user>``, each
change itself an audit entry of the owning namespace."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cairn.cli._app import app, out

shares_app = typer.Typer(
    help="Share a namespace's workflows with other namespaces (docs/access.md).",
    no_args_is_help=True,
)
app.add_typer(shares_app, name="shares")

OwnerOption = Annotated[str, typer.Option(help="The namespace that owns the workflow.")]
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
    which = "every version" if version is None else f"version {version}"
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
    from cairn.client import Client
    from cairn.engine.sharing import Sharing

    client = Client()
    try:
        with client.audited("definitions.unshare", namespace, workflow):
            Sharing(client.runtime.store).revoke(namespace, workflow, grantee, version)
    finally:
        client.close()
    which = "every version" if version is None else f"version {version}"
    out.print(f"{namespace}/{workflow} ({which}) no longer shared with {grantee}")


@shares_app.command("list")
def list_shares(
    namespace: OwnerOption = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What a namespace shares, and with whom."""
    from cairn.client import Client
    from cairn.engine.sharing import Sharing

    client = Client()
    try:
        shares = Sharing(client.runtime.store).shares(namespace)
    finally:
        client.close()
    if as_json:
        print(json.dumps([share.__dict__ for share in shares]))
        return
    if not shares:
        out.print(f"namespace {namespace} shares no workflow")
    for share in shares:
        which = "every version" if share.version is None else f"version {share.version}"
        out.print(f"{share.workflow} ({which}) with {share.grantee}  by {share.created_by}")
