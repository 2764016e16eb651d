"""Commands about artifacts: list a run's (or write one out), and clean up."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from typing import Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, out


@app.command("artifacts")
def list_artifacts(
    run_id: Annotated[str, typer.Argument(help="A run.")],
    name: Annotated[str | None, typer.Option(help="Only this artifact's versions.")] = None,
    get: Annotated[
        str | None,
        typer.Option(help="Write this artifact's content to stdout instead of listing."),
    ] = None,
    version: Annotated[
        int | None, typer.Option(help="With --get: this version (default: the latest).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List a run's artifacts, every version with its provenance; or write one out."""
    from rich.table import Table

    if get is not None:
        remote.direct_only("artifacts --get", "the content is read from the object store")
        _write_out(run_id, get, version)
        return
    if remote.active():
        with remote.api() as api:
            found = api.artifacts(run_id, name).artifacts
    else:
        found = _versions(run_id, name)
    if as_json:
        print(json.dumps(found, indent=2))
        return
    table = Table("name", "version", "size", "sha256", "node", "attempt", "model/tool", "created")
    for info in found:
        table.add_row(
            info["name"],
            str(info["version"]),
            str(info["size"]),
            info["sha256"][:12],
            f"{info['node']}#{info['iteration']}",
            str(info["attempt"]),
            " ".join(part for part in (info["model"], info["tool"]) if part),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["created_at"])),
        )
    out.print(table)


def _versions(run_id: str, name: str | None) -> list[dict[str, Any]]:
    from cairn.artifacts import ArtifactRegistry
    from cairn.client import Client

    client = Client()
    try:
        return [
            info.to_dict() for info in ArtifactRegistry(client.runtime.store).versions(run_id, name)
        ]
    finally:
        client.close()


def _write_out(run_id: str, name: str, version: int | None) -> None:
    from cairn.artifacts import ArtifactRegistry, open_store
    from cairn.client import Client

    client = Client()
    try:
        info = ArtifactRegistry(client.runtime.store).get(run_id, name, version)
        data = open_store(client.settings.effective_artifacts_url).read(info.sha256)
    finally:
        client.close()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


@app.command("artifacts-cleanup")
def artifacts_cleanup(
    retention_days: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Delete artifacts of runs finished longer ago than this "
            "(default: CAIRN_ARTIFACTS_RETENTION_DAYS; unset: keep).",
        ),
    ] = None,
    grace_s: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Delete orphan blobs older than this, seconds "
            "(default: CAIRN_ARTIFACTS_ORPHAN_GRACE_S).",
        ),
    ] = None,
) -> None:
    """Delete orphan blobs and expired artifacts (for a Kubernetes CronJob); prints
    what was deleted as JSON. Safe to run from several processes at once."""
    remote.direct_only("artifacts-cleanup", "it deletes from the object store and the database")
    from cairn.artifacts import ArtifactRegistry, open_store
    from cairn.artifacts.cleanup import clean
    from cairn.client import Client

    client = Client()
    settings = client.settings
    days = retention_days if retention_days is not None else settings.artifacts_retention_days
    try:
        report = clean(
            ArtifactRegistry(client.runtime.store),
            open_store(settings.effective_artifacts_url),
            grace=timedelta(
                seconds=grace_s if grace_s is not None else settings.artifacts_orphan_grace_s
            ),
            retention=timedelta(days=days) if days is not None else None,
        )
    finally:
        client.close()
    print(json.dumps(report.__dict__))
