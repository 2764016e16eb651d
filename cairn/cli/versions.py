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
    """Each workflow's versions: runs in flight (on which builds), waiting, the oldest,
    the patch markers they answered, and which versions are drained; then the fleet's
    builds, and which are safe to retire (no run in flight needs them)."""
    remote.key_namespace(namespace)
    if remote.active():
        with remote.api() as client:
            shown = client.versions(workflow).model_dump()
    else:
        shown = _from_database(namespace or remote.DEFAULT_NAMESPACE, workflow)
    if as_json:
        print(json.dumps(shown, indent=2))
        return
    now = time.time()
    if not shown["workflows"]:
        out.print("no workflow is registered or run here", markup=False)
    for entry in shown["workflows"]:
        out.print(f"{entry['workflow']}: {entry['in_flight']} run(s) in flight", markup=False)
        for version in entry["versions"]:
            out.print(f"  {_version_line(version, now)}", markup=False)
            for share in version.get("builds", ()):
                out.print(f"    on build {share['build']}: {share['in_flight']}", markup=False)
            for patch in version.get("patches", ()):
                out.print(f"    {_patch_line(patch)}", markup=False)
    if shown["builds"]:
        out.print("builds (the fleet's, newest first):", markup=False)
    for build in shown["builds"]:
        out.print(f"  {_build_line(build, now)}", markup=False)


def _from_database(namespace: str, workflow: str | None) -> dict[str, Any]:
    from cairn.cli.deployment import deployment
    from cairn.engine.retiring import builds_of
    from cairn.engine.versions import versions_of

    with deployment() as opened:
        workflows = versions_of(opened.orchestrator, namespace, workflow)
        builds = builds_of(opened.orchestrator)
    return {
        "workflows": [w.to_dict() for w in workflows],
        "builds": [b.to_dict() for b in builds],
    }


def _build_line(build: dict[str, Any], now: float) -> str:
    state = "live" if build["live"] else f"not seen for {_ago(now - build['last_at'])}"
    needed = build["needed_by"]
    if build["safe_to_retire"]:
        verdict = "safe to retire: no run in flight needs it"
    elif build["live"]:
        verdict = f"needed by {needed} run(s) in flight"
    else:
        verdict = f"{needed} run(s) in flight wait for a worker of it"
    return f"{build['build']}  {state}; {verdict}"


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
