"""``cairn pause``, ``cairn resume``, ``cairn pauses``: holding a workflow's new starts
or a queue in a namespace, and letting them go (docs/operations.md#pausing-starts-and-queues)
— through the HTTP API in remote mode (:mod:`cairn.cli.remote`), else on the database as
``db:<user>``, audited."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, out


class Kind(StrEnum):  # cairn.model.pauses.PauseKind, without importing the engine's model
    WORKFLOW = "workflow"
    QUEUE = "queue"


KindArgument = Annotated[Kind, typer.Argument(help="workflow (its new starts) or queue.")]
NameArgument = Annotated[str, typer.Argument(help="The workflow's or the queue's name.")]
NamespaceOption = Annotated[
    str | None, typer.Option(help="The namespace (direct mode; remote: the key's).")
]


@app.command("pause")
def pause(
    kind: KindArgument,
    name: NameArgument,
    *,
    reason: Annotated[str, typer.Option(help="Why: shown to whoever it holds up.")],
    namespace: NamespaceOption = None,
) -> None:
    """Pause a workflow's new starts (submissions are accepted and held, and start as
    their submitters on resume) or a queue (its node messages wait in the outbox)."""
    remote.key_namespace(namespace)
    if remote.active():
        with remote.api() as client:
            answer = client.pause(kind.value, name, reason)
        created, where = answer.created, answer.pause.namespace
    else:
        where = namespace or remote.DEFAULT_NAMESPACE
        created = _direct("pause", where, kind, name, reason=reason)
    note = "" if created else " (it was paused already; that pause stands)"
    out.print(f"paused {kind.value} {name} in {where}{note}", markup=False)


@app.command("resume")
def resume(kind: KindArgument, name: NameArgument, namespace: NamespaceOption = None) -> None:
    """Lift a pause: a workflow's held runs start, oldest first; a queue's messages go out."""
    remote.key_namespace(namespace)
    if remote.active():
        with remote.api() as client:
            started = client.resume(kind.value, name).started
        where = ""  # the key's namespace
    else:
        started = _direct("resume", namespace or remote.DEFAULT_NAMESPACE, kind, name)
        where = f" in {namespace or remote.DEFAULT_NAMESPACE}"
    held = f": {started} held run(s) started" if kind is Kind.WORKFLOW else ""
    out.print(f"resumed {kind.value} {name}{where}{held}", markup=False)


def _direct(action: str, namespace: str, kind: Kind, name: str, **options: str) -> Any:
    """``Pauses.pause`` or ``.resume`` on the database, as ``db:<user>``, audited."""
    from cairn.cli.deployment import deployment
    from cairn.model.pauses import PauseKind

    with deployment() as opened:  # what a resume starts is published after the answer
        writes = opened.writes
        with writes.audited("pause.change", namespace, f"{kind.value}:{name}"):
            act = getattr(opened.orchestrator.pauses, action)
            return act(namespace, PauseKind(kind.value), name, actor=writes.actor, **options)


@app.command("pauses")
def pauses(
    namespace: Annotated[
        str | None,
        typer.Option(help="One namespace's (direct mode; default: every namespace's)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What is paused, oldest first, with the runs each workflow holds."""
    remote.key_namespace(namespace)
    if remote.active():
        with remote.api() as client:
            rows = [view.model_dump() for view in client.pauses().pauses]
    else:
        from cairn.cli.deployment import deployment

        with deployment() as opened:
            found = opened.orchestrator.pauses.list(namespace)
        rows = [{**vars(p), "kind": p.kind.value} for p in found]
    if as_json:
        print(json.dumps([{**r, "paused_at": round(r["paused_at"], 3)} for r in rows], indent=2))
        return
    if not rows:
        out.print("nothing is paused", markup=False)
        return
    now = time.time()
    for r in rows:
        held = f", {r['held']} run(s) held" if r["kind"] == "workflow" else ""
        since = f"{(now - r['paused_at']) / 60:.0f} min ago"
        line = f"{r['namespace']}  {r['kind']} {r['name']}  by {r['paused_by']}, {since}{held}"
        out.print(f"{line}: {r['reason']}", markup=False)
