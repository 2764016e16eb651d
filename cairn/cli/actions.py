"""Commands that act on one run: signal, cancel, rollback — through the HTTP API in remote
mode (:mod:`cairn.cli.remote`), else on the database as ``db:<user>``, audited."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, err, json_object, out
from cairn.cli.deployment import deployment
from cairn.errors import InvalidInput

EXIT_DECLINED = 1  # rollback: not confirmed; nothing undone


@app.command()
def signal(
    run_id: Annotated[str, typer.Argument()],
    name: Annotated[
        str,
        typer.Argument(
            help="A signal the run's wait declares, or an operator's decision about a held "
            "node: recovery.retry, recovery.complete, recovery.fail."
        ),
    ],
    *,
    payload_json: Annotated[
        str | None,
        typer.Option(
            "--payload",
            help='A JSON object (recovery.complete: {"output": {...}}; recovery.fail: '
            '{"reason": "..."}).',
        ),
    ] = None,
    comment: Annotated[
        str | None,
        typer.Option(help="What you say beside it (kept in the log; who decides is you)."),
    ] = None,
    signal_id: Annotated[
        str | None, typer.Option("--id", help="Idempotency: the same id is applied once.")
    ] = None,
    node: Annotated[
        str | None, typer.Option(help="The wait or held node this answers (if several).")
    ] = None,
) -> None:
    """Send a signal to a waiting run; refused (exit 2, nothing written) if it cannot
    take it. Its actor is db:<your user> (direct mode), or the API key's principal."""
    payload = json_object(payload_json, "--payload") if payload_json is not None else None
    if remote.active():
        with remote.api() as client:
            sent = client.signal(
                run_id, name, payload, signal_id=signal_id, node=node, comment=comment
            )
        _answered(run_id, sent.status, already=None if sent.applied else signal_id)
        return
    with deployment() as opened:  # what the signal dispatches is published after the answer
        writes = opened.writes
        with writes.on_run("run.signal", run_id):
            decision = opened.orchestrator.signal(
                run_id,
                name,
                payload,
                actor=writes.actor,
                signal_id=signal_id,
                node=node,
                comment=comment,
                role=writes.principal.role.value,
            )
        applied = decision.ignored is None
        _answered(run_id, decision.state.status.value, already=None if applied else signal_id)


def _answered(run_id: str, status: str, *, already: str | None) -> None:
    if already is not None:
        out.print(f"signal {already} was already applied; nothing changed", markup=False)
    out.print(f"{run_id} {status}", markup=False)


@app.command()
def cancel(
    run_id: Annotated[str, typer.Argument()],
    reason: Annotated[
        str, typer.Option(help="Why (kept in the log and on the run).")
    ] = "cancelled from the command line",
) -> None:
    """Cancel a run: nothing new starts, running nodes stop at their next safe point (or
    are detached after the workflow's cancel_timeout), then it ends cancelled."""
    if remote.active():
        with remote.api() as client:
            done = client.cancel(run_id, reason)
        changed, status = done.changed, done.status
    else:
        with deployment() as opened:  # what the cancel stops is told after the answer
            writes = opened.writes
            with writes.on_run("run.cancel", run_id):
                decision = opened.orchestrator.cancel(run_id, reason, actor=writes.actor)
            changed, status = decision.ignored is None, decision.state.status.value
    if not changed:
        out.print("the run was already being cancelled; nothing changed", markup=False)
    out.print(f"{run_id} {status}", markup=False)


@app.command()
def rollback(
    run_id: Annotated[str, typer.Argument()],
    *,
    reason: Annotated[str, typer.Option(help="Why (kept in the log and on the run).")],
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm without a prompt: this undoes applied steps.")
    ] = False,
    plan_only: Annotated[
        bool, typer.Option("--plan", help="Only print the compensations it would run.")
    ] = False,
    to_seq: Annotated[
        int | None,
        typer.Option(
            "--to-seq", help="Back to the checkpoint after this event (see cairn events)."
        ),
    ] = None,
    step: Annotated[
        str | None,
        typer.Option("--step", help="Undo only this step's change: NODE or NODE#VISIT."),
    ] = None,
) -> None:
    """Roll a run back: stop it, run the compensation of every step that took effect
    (last first), end rolled_back; or, --to-seq S, undo only the steps after event S and
    resume from the state the run had there; or, --step NODE, undo only that step and
    go on. Prints the compensations it will run first, then asks (--yes: does not ask;
    --plan: only prints them). Declined: exit 1, nothing undone."""
    node, iteration = _step(step) if step is not None else (None, None)
    asked = Rollback(run_id, reason, to_seq, node, iteration)
    plan = asked.plan_over_http() if remote.active() else asked.plan()
    for line in plan_lines(run_id, plan):
        out.print(line, markup=False)
    if plan_only:
        return
    if not yes and not typer.confirm(
        f"Roll back run {run_id}? It undoes what these steps did.", default=False, err=True
    ):
        err.print("not confirmed: nothing rolled back", markup=False)
        raise typer.Exit(EXIT_DECLINED)
    status = asked.act_over_http() if remote.active() else asked.act()
    out.print(f"{run_id} {status}", markup=False)


@dataclass(frozen=True)
class Rollback:
    """What ``cairn rollback`` asks, sent either way."""

    run_id: str
    reason: str
    to_seq: int | None
    step: str | None
    step_iteration: int | None

    @property
    def scope(self) -> dict[str, Any]:
        return {"to_seq": self.to_seq, "step": self.step, "step_iteration": self.step_iteration}

    def plan(self) -> list[dict[str, Any]]:
        with deployment() as opened:
            return opened.orchestrator.rollback_plan(self.run_id, **self.scope)

    def plan_over_http(self) -> list[dict[str, Any]]:
        with remote.api() as client:
            found = client.rollback_plan(self.run_id, **self.scope)
        return [entry.model_dump() for entry in found.compensations]

    def act(self) -> str:
        with deployment() as opened:
            writes = opened.writes
            with writes.on_run("run.rollback", self.run_id):
                opened.orchestrator.rollback(
                    self.run_id, self.reason, actor=writes.actor, confirm=True, **self.scope
                )
            return opened.orchestrator.get_run(self.run_id).status.value

    def act_over_http(self) -> str:
        with remote.api() as client:
            return client.rollback(self.run_id, self.reason, **self.scope).status


def plan_lines(run_id: str, plan: list[dict[str, Any]]) -> list[str]:
    if not plan:
        return [f"rolling back {run_id} runs no compensation: no step to undo took effect"]
    lines = [f"rolling back {run_id} runs {len(plan)} compensation(s), the last step first:"]
    for entry in plan:
        undo = entry["compensation"] or "(no compensation: nothing to run)"
        lines.append(f"  {entry['node']}#{entry['iteration']}: {undo}")
    return lines


def _step(text: str) -> tuple[str, int | None]:
    node, _, visit = text.partition("#")
    if not node or (visit and not visit.isdigit()):
        raise InvalidInput(f"--step is NODE or NODE#VISIT, not {text!r}")
    return node, int(visit) if visit else None
