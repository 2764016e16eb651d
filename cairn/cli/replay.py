"""Commands that run a run's handlers again, isolated from the real world: replay, fork."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from cairn.cli._app import app, cwd_importable, err, out

if TYPE_CHECKING:
    from cairn.timetravel.fork import DryRun, DryStep
    from cairn.timetravel.ledger import EffectUse
    from cairn.timetravel.replay import ReplayReport, StepReplay

EXIT_DIVERGED = 1  # replay: a step's result differs from the recorded one
# Fork dry run: the run ended other than succeeded, hit the step cap, or would start a
# child run it does not simulate.
EXIT_INCOMPLETE = 1
EXIT_DECLINED = 1  # fork --live: not confirmed; nothing started
EXIT_REFUSED = 3  # an effect with nothing recorded and no replay stub was refused

StubsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--stubs",
        help="Import replay stubs: a module (its @replay_stub functions) or "
        "name=module:function. Repeatable.",
    ),
]


@app.command("replay")
def replay_command(
    run_id: Annotated[str, typer.Argument()],
    from_seq: Annotated[
        int, typer.Option("--from", help="Replay the steps from this seq on (cairn history).")
    ] = 1,
    stubs: StubsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Run the handlers of a run's recorded steps again, as registered in code now, each
    on the state it was given, isolated: effects return what the ledger recorded (or a
    stub's fake result, or are refused) and never call the outside world; artifacts put
    go to a sandbox; nothing is written. Report where the results differ from the
    recorded ones. Exit 1 if one diverged, 3 if an effect was refused."""
    from cairn.client import Client
    from cairn.timetravel.ledger import load_stubs
    from cairn.timetravel.replay import Replayer

    cwd_importable()
    load_stubs(stubs or [])
    client = Client()
    try:
        report = Replayer(client.runtime.orchestrator, run_id).run(
            from_seq, on_step=None if as_json else _print_replayed
        )
    finally:
        client.close()
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        for line in summary_lines(report):
            out.print(line, markup=False, soft_wrap=True)
    if report.diverged:
        raise typer.Exit(EXIT_DIVERGED)
    if report.refused:
        raise typer.Exit(EXIT_REFUSED)


@app.command()
def fork(
    run_id: Annotated[str, typer.Argument()],
    *,
    at: Annotated[int, typer.Option("--at", help="Fork from the state after this event.")],
    patch: Annotated[
        str | None,
        typer.Option("--patch", help="A JSON merge patch (RFC 7386) of the run's vars."),
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="A real run, dispatched to the fleet (confirm it).")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm --live without a prompt.")] = False,
    max_steps: Annotated[
        int | None,
        typer.Option("--max-steps", help="Dry run: stop after this many decisions [default: 200]."),
    ] = None,
    stubs: StubsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Fork a run from its checkpoint after event --at, its vars patched: a dry run by
    default (this process runs it forward, isolated as a replay is: nothing reaches the
    outside world, nothing is written; it stops at the end, at a wait, or at a refused
    effect), or with --live a real run in the same namespace, linked to its parent, whose
    effects get fresh idempotency keys. Dry run: exit 0 if the run ended succeeded or
    parked at a wait; 3 if an effect, a model call or an HTTP request was refused; 1 if
    it ended otherwise (failed, cancelled, rolled back), hit the step cap or a child run."""
    from cairn.client import Client
    from cairn.timetravel.fork import (
        DEFAULT_MAX_STEPS,
        Ending,
        dry_run,
        fork_live,
        fork_point,
        parse_patch,
    )
    from cairn.timetravel.ledger import load_stubs

    cwd_importable()
    changes = parse_patch(patch)
    load_stubs(stubs or [])
    client = Client()
    try:
        orchestrator = client.runtime.orchestrator
        point = fork_point(orchestrator, run_id, at, changes)
        if live:
            if not yes and not typer.confirm(
                f"Start a live fork of run {run_id} at seq {at}? It is a real run: its "
                "effects reach the outside world (under fresh keys).",
                default=False,
                err=True,
            ):
                err.print("not confirmed: nothing started", markup=False)
                raise typer.Exit(EXIT_DECLINED)
            with client.audited("run.fork", point.namespace, run_id):
                fork_id = fork_live(orchestrator, point, confirm=True, actor=client.actor)
            view = orchestrator.get_run(fork_id)
        else:
            found = dry_run(
                orchestrator,
                point,
                max_steps=DEFAULT_MAX_STEPS if max_steps is None else max_steps,
                on_step=None if as_json else _print_dry_step,
            )
    finally:
        client.close()
    if live:
        if as_json:
            print(json.dumps(view.to_dict(), indent=2, default=str))
        else:
            out.print(
                f"{fork_id} {view.status.value}: live fork of run {run_id} at seq {at}",
                markup=False,
            )
        return
    if as_json:
        print(json.dumps(found.to_dict(), indent=2, default=str))
    else:
        for line in dry_run_lines(found):
            out.print(line, markup=False, soft_wrap=True)
    if found.ending == Ending.REFUSED:
        raise typer.Exit(EXIT_REFUSED)
    if found.ending in (Ending.STEP_CAP, Ending.CHILD_RUN) or not found.went_well:
        raise typer.Exit(EXIT_INCOMPLETE)


# -- text forms -----------------------------------------------------------------------------


def _print_replayed(step: StepReplay) -> None:
    for line in replayed_lines(step):
        out.print(line, markup=False, soft_wrap=True)


def replayed_lines(replayed: StepReplay) -> list[str]:
    from cairn.cli.render import change_lines
    from cairn.timetravel.replay import Verdict

    step = replayed.step
    verdict = replayed.verdict.upper() if replayed.verdict != Verdict.SAME else "same"
    effects = _effects(replayed.executed.effects) if replayed.executed is not None else ""
    lines = [f"{step.seq:>5}  {step.label:<22} {verdict:<9} {effects}".rstrip()]
    if replayed.note:
        lines.append(f"         {replayed.note}")
    lines += [f"         {line}" for line in change_lines(list(replayed.changes))]
    if replayed.decider:
        lines.append(f"         {replayed.decider}")
    return lines


def summary_lines(report: ReplayReport) -> list[str]:
    counts = report.counts()
    lines = [
        f"replay of {report.run_id} ({report.workflow}@{report.version}) from seq "
        f"{report.from_seq}: "
        + ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
        + f"; writes went to {report.namespace} (none to the run)"
    ]
    first = report.first_divergence
    if first is not None:
        lines.append(f"first divergence: seq {first.step.seq} {first.step.label}")
    for refused in report.refused:
        lines.append(f"refused: seq {refused.step.seq} {refused.step.label}: {refused.note}")
    return lines


def _print_dry_step(step: DryStep) -> None:
    out.print(dry_step_line(step), markup=False, soft_wrap=True)


def dry_step_line(step: DryStep) -> str:
    executed = step.executed
    result = (
        json.dumps(dict(executed.output), sort_keys=True)
        if executed.output is not None
        else executed.error or executed.status
    )
    moves = "; ".join(step.transitions)
    effects = _effects(executed.effects)
    line = f"  {step.label:<22} {executed.status:<10} {result}"
    return f"{line}  [{effects}]  {moves}" if effects else f"{line}  {moves}"


def dry_run_lines(found: DryRun) -> list[str]:
    patch = f" patched {json.dumps(found.patch)}" if found.patch else ""
    lines = [
        f"dry run of a fork of {found.parent_run_id} at seq {found.fork_seq}{patch} "
        f"({found.workflow}@{found.version}; writes went to {found.namespace}, none to any "
        "run): "
        f"{found.ending}: {found.detail}",
        f"status: {found.state.status.value}"
        + (f" ({found.state.reason})" if found.state.reason else ""),
        "vars: " + json.dumps(found.state.vars, indent=2, sort_keys=True),
    ]
    if found.effects:
        lines.append(
            "effects: "
            + _effects(found.effects)
            + " (a live fork calls each under a fresh key of its own)"
        )
    return lines


def _effects(uses: tuple[EffectUse, ...] | list[EffectUse]) -> str:
    counts: dict[str, int] = {}
    for use in uses:
        counts[use.answer] = counts.get(use.answer, 0) + 1
    return ", ".join(f"{count} effect(s) {answer}" for answer, count in counts.items())
