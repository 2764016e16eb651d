"""``cairn pause``, ``cairn resume``, ``cairn pauses``: holding a workflow's new starts
or a queue in a namespace, and letting them go (docs/operations.md#pausing-starts-and-queues)."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from typing import Annotated

import typer

from cairn.cli._app import app, out


class Kind(StrEnum):  # cairn.model.pauses.PauseKind, without importing the engine's model
    WORKFLOW = "workflow"
    QUEUE = "queue"


KindArgument = Annotated[Kind, typer.Argument(help="workflow (its new starts) or queue.")]
NameArgument = Annotated[str, typer.Argument(help="The workflow's or the queue's name.")]
NamespaceOption = Annotated[str, typer.Option(help="The namespace it is paused in.")]


@app.command("pause")
def pause(
    kind: KindArgument,
    name: NameArgument,
    *,
    reason: Annotated[str, typer.Option(help="Why: shown to whoever it holds up.")],
    namespace: NamespaceOption = "default",
) -> None:
    """Pause a workflow's new starts (submissions are accepted and held, and start as
    their submitters on resume) or a queue (its node messages wait in the outbox)."""
    from cairn.cli.deployment import deployment
    from cairn.model.pauses import PauseKind

    with deployment() as opened:
        writes = opened.writes
        with writes.audited("pause.change", namespace, f"{kind.value}:{name}"):
            created = opened.orchestrator.pauses.pause(
                namespace, PauseKind(kind.value), name, reason=reason, actor=writes.actor
            )
    note = "" if created else " (it was paused already; that pause stands)"
    out.print(f"paused {kind.value} {name} in {namespace}{note}", markup=False)


@app.command("resume")
def resume(kind: KindArgument, name: NameArgument, namespace: NamespaceOption = "default") -> None:
    """Lift a pause: a workflow's held runs start, oldest first; a queue's messages go out."""
    from cairn.cli.deployment import deployment
    from cairn.model.pauses import PauseKind

    with deployment() as opened:
        writes = opened.writes
        with writes.audited("pause.change", namespace, f"{kind.value}:{name}"):
            started = opened.orchestrator.pauses.resume(
                namespace, PauseKind(kind.value), name, actor=writes.actor
            )
    held = f": {started} held run(s) started" if kind is Kind.WORKFLOW else ""
    out.print(f"resumed {kind.value} {name} in {namespace}{held}", markup=False)


@app.command("pauses")
def pauses(
    namespace: Annotated[
        str | None, typer.Option(help="One namespace's (default: every namespace's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What is paused, oldest first, with the runs each workflow holds."""
    from cairn.cli.deployment import deployment

    with deployment() as opened:
        found = opened.orchestrator.pauses.list(namespace)
    if as_json:
        rows = [
            {**vars(p), "kind": p.kind.value, "paused_at": round(p.paused_at, 3)} for p in found
        ]
        print(json.dumps(rows, indent=2))
        return
    if not found:
        out.print("nothing is paused", markup=False)
        return
    now = time.time()
    for p in found:
        held = f", {p.held} run(s) held" if p.kind.value == "workflow" else ""
        since = f"{(now - p.paused_at) / 60:.0f} min ago"
        out.print(
            f"{p.namespace}  {p.kind.value} {p.name}  by {p.paused_by}, {since}{held}: {p.reason}",
            markup=False,
        )
