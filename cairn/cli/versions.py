"""``cairn versions``: per workflow, each version registered or still run, with its runs
in flight, how many of them wait and since when the oldest — what to watch while draining
a version (docs/versions.md#draining-a-version). Through the HTTP API in remote mode
(:mod:`cairn.cli.remote`), else on the database."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, out


@app.command("versions")
def versions(
    workflow: Annotated[str | None, typer.Argument(help="Only this workflow.")] = None,
    namespace: Annotated[
        str | None, typer.Option(help="The namespace (direct mode; remote: the key's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Each workflow's versions: runs in flight, waiting, the oldest, and which versions
    are drained (no run in flight: nothing will run their graph again)."""
    remote.key_namespace(namespace)
    if remote.active():
        with remote.api() as client:
            shown = [w.model_dump() for w in client.versions(workflow).workflows]
    else:
        from cairn.cli.deployment import deployment
        from cairn.engine.versions import versions_of

        with deployment() as opened:
            where = namespace or remote.DEFAULT_NAMESPACE
            shown = [w.to_dict() for w in versions_of(opened.orchestrator, where, workflow)]
    if as_json:
        print(json.dumps(shown, indent=2))
        return
    if not shown:
        out.print("no workflow is registered or run here", markup=False)
        return
    now = time.time()
    for entry in shown:
        out.print(f"{entry['workflow']}: {entry['in_flight']} run(s) in flight", markup=False)
        for version in entry["versions"]:
            out.print(f"  {_version_line(version, now)}", markup=False)
            for patch in version.get("patches", ()):
                out.print(f"    {_patch_line(patch)}", markup=False)


def _version_line(version: dict[str, Any], now: float) -> str:
    newest = " (newest: new runs start here)" if version["newest"] else ""
    head = f"@{version['version']}{newest}"
    if version["drained"]:
        return f"{head}  no run in flight" + ("" if version["newest"] else ": drained")
    oldest = _ago(now - version["oldest_at"]) if version["oldest_at"] is not None else "?"
    return (
        f"{head}  {version['in_flight']} in flight, {version['waiting']} waiting, "
        f"oldest started {oldest} ago"
    )


def _patch_line(patch: dict[str, Any]) -> str:
    counts = (
        f"{patch['answered_true']} took the new path, {patch['answered_false']} the old, "
        f"{patch['unanswered']} not asked yet"
    )
    verdict = (
        "a run in flight may still need the old path"
        if patch["needs_old_path"]
        else "no run in flight needs the old path"
    )
    return f"patch {patch['patch']}: {counts} — {verdict}"


def _ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
