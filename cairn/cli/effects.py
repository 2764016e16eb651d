"""Commands about external side effects: the ledger of a run, a person's resolution of
an effect nobody could settle, and reconciliation — through the HTTP API in remote mode
(:mod:`cairn.cli.remote`), else on the database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, cwd_importable, json_object, out

EXIT_NEEDS_HUMAN = 1
OUTCOMES = ("applied", "absent", "compensated")


@app.command()
def effects(
    run_id: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The effects ledger of a run: each external side effect by its key, and its outcome."""
    from rich.table import Table

    if remote.active():
        with remote.api() as api:
            found = api.effects(run_id).effects
    else:
        found = _ledger(run_id)
    if as_json:
        print(json.dumps(found, indent=2))
        return
    if not found:
        out.print(f"run {run_id} has no effects", markup=False)
        return
    table = Table("key", "effect", "node", "status", "calls", "digest")
    for effect in found:
        table.add_row(
            effect["key"],
            effect["name"],
            f"{effect['node']}#{effect['iteration']}",
            effect["status"],
            str(effect["calls"]),
            (effect["digest"] or "")[:12],
        )
    out.print(table)


def _ledger(run_id: str) -> list[dict[str, Any]]:
    from cairn.client import Client
    from cairn.effects.adapters import Effect

    client = Client()
    try:
        with client.runtime.store.reading() as tx:
            return [Effect.from_row(row).to_dict() for row in tx.effects_of(run_id)]
    finally:
        client.close()


@app.command()
def resolve(
    run_id: Annotated[str, typer.Argument()],
    key: Annotated[str, typer.Argument(help="The effect's key (see cairn effects).")],
    *,
    outcome: Annotated[
        str,
        typer.Option(
            help="What really happened at the external system: applied (it took effect), "
            "absent (it never did) or compensated (it did, and was undone by hand)."
        ),
    ],
    note: Annotated[str, typer.Option(help="What you checked, and where (kept with it).")],
    record: Annotated[
        str | None, typer.Option(help="The external system's record of it (a JSON object).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Record what really happened to an effect the reconciler flagged, or whose outcome
    nobody could tell: it leaves the reconciler's report; the ledger keeps what it was,
    who resolved it, when and why. Refused (exit 2) if it is not flagged or unknown."""
    from cairn.errors import InvalidInput

    if outcome not in OUTCOMES:
        raise InvalidInput(f"--outcome is one of {', '.join(OUTCOMES)}; not {outcome!r}")
    found = json_object(record, "--record") if record is not None else None
    if remote.active():
        with remote.api() as api:
            effect = api.resolve(run_id, key, outcome, note, found).effect
    else:
        effect = _resolved(run_id, key, outcome, note, found)
    if as_json:
        print(json.dumps(effect, indent=2))
        return
    resolution = effect.get("resolution") or {}
    out.print(
        f"effect {key} of run {run_id}: {effect['status']} (was {resolution.get('was')}), "
        f"resolved by {resolution.get('by')}",
        markup=False,
        soft_wrap=True,
    )


def _resolved(
    run_id: str, key: str, outcome: str, note: str, record: dict[str, Any] | None
) -> dict[str, Any]:
    from cairn.cli.deployment import deployment
    from cairn.effects.resolution import Outcome, Resolve, resolve_effect

    with deployment() as opened:
        writes = opened.writes
        asked = Resolve(run_id, key, Outcome(outcome), note, writes.actor, record)
        with writes.on_run("effect.resolve", run_id):
            return resolve_effect(opened.store, asked).to_dict()


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
    run as a CronJob, and with two at once. Remote mode: a pass over the API key's
    namespace, with the adapters the API process has (admins)."""
    if remote.active():
        if metrics_file is not None:
            remote.direct_only("reconcile --metrics-file", "the metrics are written here")
        with remote.api() as api:
            drift = api.reconcile(grace, limit).model_dump()
    else:
        drift = _reconciled(grace, limit, metrics_file)
    text = json.dumps(drift, indent=2)
    print(text)
    if report is not None:
        report.write_text(text + "\n", encoding="utf-8")
    if drift["needs_human"]:
        raise typer.Exit(EXIT_NEEDS_HUMAN)


def _reconciled(grace: float | None, limit: int, metrics_file: Path | None) -> dict[str, Any]:
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
    if metrics_file is not None:
        drift.write_metrics(metrics_file)
    return drift.to_dict()
