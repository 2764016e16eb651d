"""``cairn bulk cancel|signal|fork``: one action on every run a filter selects, asked as
the API asks it — a dry run first that counts the runs and shows some, then, confirmed
(``--yes`` or at the prompt), the action on exactly the runs counted: their selection
token goes with it, and if the filter selects others by then nothing is done
(``selection_changed``). Through the API in remote mode, else on the database as
``db:<user>`` (:mod:`cairn.operations.bulk` either way)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, err, json_object, out
from cairn.cli.deployment import deployment
from cairn.cli.options import (
    CreatedAfterOption,
    CreatedBeforeOption,
    RunSelection,
    StatusOption,
    VersionOption,
    WorkflowOption,
)
from cairn.errors import InvalidInput

bulk = typer.Typer(
    help="One action on every run a filter selects: counted first, then confirmed.",
    no_args_is_help=True,
)
app.add_typer(bulk, name="bulk")

EXIT_DECLINED = 1  # not confirmed: nothing done
SAMPLE = 10  # run ids shown of a selection

IdsOption = Annotated[list[str] | None, typer.Option("--id", help="Only this run (repeatable).")]
NamespaceOption = Annotated[
    str, typer.Option(help="The runs' namespace (direct mode; remote: the key's).")
]
YesOption = Annotated[bool, typer.Option("--yes", help="Act without asking, once counted.")]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Machine-readable: the count (or, with --yes, the result).")
]


@dataclass(frozen=True)
class BulkAction:
    """One bulk action as asked: which, on what, with what."""

    action: str  # cancel | signal | fork
    selection: RunSelection
    namespace: str
    options: dict[str, Any] = field(default_factory=dict)

    def run(self, *, dry_run: bool, expect: str | None = None) -> dict[str, Any]:
        """The API's answer (``BulkResult``): what is selected and, unless a dry run, done."""
        if remote.active():
            return self._over_http(dry_run, expect)
        return self._direct(dry_run, expect)

    def _over_http(self, dry_run: bool, expect: str | None) -> dict[str, Any]:
        body, options = self.selection.body(), self.options
        with remote.api() as client:
            if self.action == "cancel":
                found = client.bulk_cancel(body, options["reason"], dry_run=dry_run, expect=expect)
            elif self.action == "signal":
                found = client.bulk_signal(
                    body,
                    options["name"],
                    options["payload"],
                    comment=options["comment"],
                    dry_run=dry_run,
                    expect=expect,
                )
            else:
                found = client.bulk_fork(body, options["patch"], dry_run=dry_run, expect=expect)
        return found.model_dump()

    def _direct(self, dry_run: bool, expect: str | None) -> dict[str, Any]:
        from cairn.operations.bulk import Bulk

        selection, options = self.selection.to_filter(), self.options
        with deployment() as opened:
            writes = opened.writes
            acting = Bulk(opened.orchestrator, replace(writes.principal, namespace=self.namespace))
            # As over HTTP: the action is one audit entry, named by the token acted on.
            audited = (
                nullcontext()
                if dry_run
                else writes.audited(f"bulk.{self.action}", self.namespace, expect)
            )
            with audited:
                if self.action == "cancel":
                    found = acting.cancel(
                        selection, options["reason"], dry_run=dry_run, expect=expect
                    )
                elif self.action == "signal":
                    found = acting.signal(
                        selection,
                        options["name"],
                        options["payload"],
                        comment=options["comment"],
                        dry_run=dry_run,
                        expect=expect,
                        request_id=None,
                    )
                else:
                    found = acting.fork_from_failure(
                        selection, options["patch"], dry_run=dry_run, expect=expect, request_id=None
                    )
            return found.to_dict()


def _carry_out(asked: BulkAction, what: str, *, yes: bool, as_json: bool) -> None:
    """Count, show, confirm, act on exactly what was counted; print how each run ended."""
    if not remote.active() and not asked.selection.to_filter().narrowed:
        raise InvalidInput("name which runs: a --status, --workflow, --id, ... (all runs: no)")
    remote.key_namespace(asked.namespace)
    counted = asked.run(dry_run=True)
    if as_json and not yes:
        print(json.dumps(counted, indent=2))
        return
    if not as_json:
        for line in count_lines(counted, what):
            out.print(line, markup=False)
    if not counted["matched"]:
        return
    if not yes and not typer.confirm(f"{what} these {counted['matched']} run(s)?", err=True):
        err.print("not confirmed: nothing done", markup=False)
        raise typer.Exit(EXIT_DECLINED)
    done = asked.run(dry_run=False, expect=counted["selection"])
    if as_json:
        print(json.dumps(done, indent=2))
        return
    for line in done_lines(done):
        out.print(line, markup=False)


def count_lines(found: dict[str, Any], what: str) -> list[str]:
    matched, run_ids = found["matched"], found["run_ids"]
    if not matched:
        return [f"no run is selected: nothing to {what.lower()}"]
    lines = [f"{what}: {matched} run(s) selected ({found['selection']})"]
    lines += [f"  {run_id}" for run_id in run_ids[:SAMPLE]]
    if matched > SAMPLE:
        lines.append(f"  ... and {matched - SAMPLE} more")
    return lines


def done_lines(found: dict[str, Any]) -> list[str]:
    lines = [f"done: {len(found['done'])} run(s); refused: {len(found['refused'])}"]
    for entry in found["done"]:
        told = ", ".join(f"{k} {v}" for k, v in entry.items() if k != "run_id")
        lines.append(f"  {entry['run_id']}  {told}")
    lines += [f"  {e['run_id']}  refused: {e['code']}: {e['message']}" for e in found["refused"]]
    return lines


@bulk.command("cancel")
def bulk_cancel(  # noqa: PLR0917 - typer passes options by name
    status: StatusOption = None,
    workflow: WorkflowOption = None,
    version: VersionOption = None,
    created_after: CreatedAfterOption = None,
    created_before: CreatedBeforeOption = None,
    ids: IdsOption = None,
    reason: Annotated[
        str, typer.Option(help="Why (kept in each run's log).")
    ] = "cancelled in bulk from the command line",
    namespace: NamespaceOption = "default",
    yes: YesOption = False,
    as_json: JsonOption = False,
) -> None:
    """Cancel every unfinished run the filter selects: counted first, then confirmed."""
    selection = RunSelection.of(status, workflow, version, created_after, created_before, ids)
    asked = BulkAction("cancel", selection, namespace, {"reason": reason})
    _carry_out(asked, "Cancel", yes=yes, as_json=as_json)


@bulk.command("signal")
def bulk_signal(  # noqa: PLR0917 - typer passes options by name
    name: Annotated[str, typer.Argument(help="The signal (or recovery.retry, ...).")],
    status: StatusOption = None,
    workflow: WorkflowOption = None,
    version: VersionOption = None,
    created_after: CreatedAfterOption = None,
    created_before: CreatedBeforeOption = None,
    ids: IdsOption = None,
    payload_json: Annotated[
        str | None, typer.Option("--payload", help="A JSON object, sent to each run.")
    ] = None,
    comment: Annotated[str | None, typer.Option(help="What you say beside it.")] = None,
    namespace: NamespaceOption = "default",
    yes: YesOption = False,
    as_json: JsonOption = False,
) -> None:
    """Send signal NAME to every waiting run the filter selects: counted first, then
    confirmed; a run that cannot take it is listed as refused, the others go on."""
    payload = json_object(payload_json, "--payload") if payload_json is not None else None
    selection = RunSelection.of(status, workflow, version, created_after, created_before, ids)
    options = {"name": name, "payload": payload, "comment": comment}
    _carry_out(
        BulkAction("signal", selection, namespace, options), "Signal", yes=yes, as_json=as_json
    )


@bulk.command("fork")
def bulk_fork(  # noqa: PLR0917 - typer passes options by name
    status: StatusOption = None,
    workflow: WorkflowOption = None,
    version: VersionOption = None,
    created_after: CreatedAfterOption = None,
    created_before: CreatedBeforeOption = None,
    ids: IdsOption = None,
    patch: Annotated[
        str | None, typer.Option(help="A JSON merge patch (RFC 7386) of each fork's vars.")
    ] = None,
    namespace: NamespaceOption = "default",
    yes: YesOption = False,
    as_json: JsonOption = False,
) -> None:
    """Fork every failed run the filter selects from its failure (a live run from the
    checkpoint where the step that failed it was dispatched, its vars patched): counted
    first, then confirmed."""
    changes = json_object(patch, "--patch") if patch is not None else None
    selection = RunSelection.of(status, workflow, version, created_after, created_before, ids)
    asked = BulkAction("fork", selection, namespace, {"patch": changes})
    _carry_out(asked, "Fork", yes=yes, as_json=as_json)
