"""Commands about external side effects: the ledger of a run, and reconciliation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from cairn.cli._app import app, cwd_importable, out

EXIT_NEEDS_HUMAN = 1


@app.command()
def effects(
    run_id: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The effects ledger of a run: each external side effect by its key, and its outcome."""
    from rich.table import Table

    from cairn.client import Client
    from cairn.effects.adapters import Effect

    client = Client()
    try:
        with client.runtime.store.reading() as tx:
            found = [Effect.from_row(row) for row in tx.effects_of(run_id)]
    finally:
        client.close()
    if as_json:
        print(json.dumps([effect.to_dict() for effect in found], indent=2))
        return
    if not found:
        out.print(f"run {run_id} has no effects", markup=False)
        return
    table = Table("key", "effect", "node", "status", "calls", "digest")
    for effect in found:
        table.add_row(
            effect.key,
            effect.name,
            f"{effect.node}#{effect.iteration}",
            effect.status,
            str(effect.calls),
            (effect.digest or "")[:12],
        )
    out.print(table)


@app.command()
def reconcile(
    report: Annotated[
        Path | None, typer.Option(help="Also write the drift report (JSON) to this file.")
    ] = None,
    metrics_file: Annotated[
        Path | None,
        typer.Option(help="Write Prometheus metrics here (node-exporter textfile collector)."),
    ] = None,
    grace: Annotated[
        float | None,
        typer.Option(help="Seconds an intent may be in flight before it is checked."),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many effects per pass.")] = 500,
) -> None:
    """One reconciliation pass: compare the effects ledger with the external systems,
    repair timing gaps, report discrepancies that need a person (exit 1 if any). Safe to
    run as a CronJob, and with two at once."""
    from cairn.client import Client
    from cairn.reconciler import Reconciler

    cwd_importable()
    client = Client()
    try:
        settings = client.settings
        reconciler = Reconciler(
            client.runtime.store, grace if grace is not None else settings.reconcile_grace
        )
        drift = reconciler.run_once(limit)
    finally:
        client.close()
    text = json.dumps(drift.to_dict(), indent=2)
    print(text)
    if report is not None:
        report.write_text(text + "\n", encoding="utf-8")
    if metrics_file is not None:
        drift.write_metrics(metrics_file)
    if drift.needs_human:
        raise typer.Exit(EXIT_NEEDS_HUMAN)
