"""Commands that run a run's handlers again, isolated from the real world: replay, fork —
in this process (direct mode), or in the API's (remote mode: :mod:`cairn.cli.remote`),
whose report is the same JSON the renderers below print either way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, cwd_importable, err, out

if TYPE_CHECKING:
    from cairn.client import Client
    from cairn.timetravel.fork import DryStep, ForkPoint
    from cairn.timetravel.replay import StepReplay

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
    if remote.active():
        if stubs:
            remote.direct_only("replay --stubs", "a replay over HTTP uses the API's own stubs")
        with remote.api() as client:
            report = client.replay(run_id, from_seq).model_dump()
        if not as_json:
            for step in report["steps"]:
                _print_lines(replayed_lines(step))
    else:
        report = _replayed(run_id, from_seq, stubs or [], quiet=as_json)
    if as_json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_lines(summary_lines(report))
    if report["diverged"]:
        raise typer.Exit(EXIT_DIVERGED)
    if report["refused"]:
        raise typer.Exit(EXIT_REFUSED)


def _replayed(run_id: str, from_seq: int, stubs: list[str], *, quiet: bool) -> dict[str, Any]:
    from cairn.client import Client
    from cairn.timetravel.ledger import load_stubs
    from cairn.timetravel.replay import Replayer

    cwd_importable()
    load_stubs(stubs)
    client = Client()
    try:
        report = Replayer(client.runtime.orchestrator, run_id).run(
            from_seq, on_step=None if quiet else _print_replayed
        )
    finally:
        client.close()
    return report.to_dict()


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
    asked = Fork(run_id, at, patch, max_steps, stubs or [], quiet=as_json)
    if live:
        if not yes and not typer.confirm(
            f"Start a live fork of run {run_id} at seq {at}? It is a real run: its "
            "effects reach the outside world (under fresh keys).",
            default=False,
            err=True,
        ):
            err.print("not confirmed: nothing started", markup=False)
            raise typer.Exit(EXIT_DECLINED)
        view = asked.live_over_http() if remote.active() else asked.live()
        if as_json:
            print(json.dumps(view, indent=2, default=str))
        else:
            out.print(
                f"{view['id']} {view['status']}: live fork of run {run_id} at seq {at}",
                markup=False,
            )
        return
    found = asked.dry_over_http() if remote.active() else asked.dry()
    if as_json:
        print(json.dumps(found, indent=2, default=str))
    else:
        _print_lines(dry_run_lines(found))
    if found["ending"] == "refused":
        raise typer.Exit(EXIT_REFUSED)
    if found["ending"] in ("step_cap", "child_run") or not found["went_well"]:
        raise typer.Exit(EXIT_INCOMPLETE)


@dataclass(frozen=True)
class Fork:
    """What ``cairn fork`` asks, done either way; answers are JSON: a live fork's run
    as ``RunView.to_dict()``, a dry run as ``DryRun.to_dict()`` with ``went_well``."""

    run_id: str
    at: int
    patch: str | None
    max_steps: int | None
    stubs: list[str]
    quiet: bool

    def live(self) -> dict[str, Any]:
        from cairn.timetravel.fork import fork_live

        with self._point() as (client, point):
            orchestrator = client.runtime.orchestrator
            with client.audited("run.fork", point.namespace, self.run_id):
                fork_id = fork_live(orchestrator, point, confirm=True, actor=client.actor)
            return orchestrator.get_run(fork_id).to_dict()

    def dry(self) -> dict[str, Any]:
        from cairn.timetravel.fork import DEFAULT_MAX_STEPS, dry_run

        with self._point() as (client, point):
            found = dry_run(
                client.runtime.orchestrator,
                point,
                max_steps=DEFAULT_MAX_STEPS if self.max_steps is None else self.max_steps,
                on_step=None if self.quiet else _print_dry_step,
            )
        return {**found.to_dict(), "went_well": found.went_well}

    @contextmanager
    def _point(self) -> Iterator[tuple[Client, ForkPoint]]:
        from cairn.client import Client
        from cairn.timetravel.fork import fork_point, parse_patch
        from cairn.timetravel.ledger import load_stubs

        cwd_importable()
        changes = parse_patch(self.patch)
        load_stubs(self.stubs)
        client = Client()
        try:
            yield client, fork_point(client.runtime.orchestrator, self.run_id, self.at, changes)
        finally:
            client.close()

    def live_over_http(self) -> dict[str, Any]:
        from cairn.cli.views import run_view

        self._no_stubs()
        with remote.api() as client:
            forked = client.fork(self.run_id, self.at, self._changes())
            return run_view(client.get_run(forked.run_id))

    def dry_over_http(self) -> dict[str, Any]:
        self._no_stubs()
        steps = {"max_steps": self.max_steps} if self.max_steps is not None else {}
        with remote.api() as client:
            found = client.dry_run(self.run_id, self.at, self._changes(), **steps).model_dump()
        if not self.quiet:
            for step in found["steps"]:
                out.print(dry_step_line(step), markup=False, soft_wrap=True)
        return found

    def _changes(self) -> dict[str, Any] | None:
        from cairn.cli._app import json_object

        return json_object(self.patch, "--patch") if self.patch is not None else None

    def _no_stubs(self) -> None:
        if self.stubs:
            remote.direct_only("fork --stubs", "a dry run over HTTP uses the API's own stubs")


# -- text forms -----------------------------------------------------------------------------


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        out.print(line, markup=False, soft_wrap=True)


def _print_replayed(step: StepReplay) -> None:
    _print_lines(replayed_lines(step.to_dict()))


def replayed_lines(replayed: dict[str, Any]) -> list[str]:
    """A replayed step (``StepReplay.to_dict()``), as lines."""
    from cairn.cli.render import change_lines

    verdict = replayed["verdict"]
    verdict = verdict.upper() if verdict != "same" else "same"
    executed = replayed["replayed"]
    effects = _effects(executed["effects"]) if executed is not None else ""
    lines = [f"{replayed['seq']:>5}  {replayed['label']:<22} {verdict:<9} {effects}".rstrip()]
    if replayed["note"]:
        lines.append(f"         {replayed['note']}")
    lines += [f"         {line}" for line in change_lines(replayed["changes"])]
    if replayed["decider"]:
        lines.append(f"         {replayed['decider']}")
    return lines


def summary_lines(report: dict[str, Any]) -> list[str]:
    """A replay's report (``ReplayReport.to_dict()``), summed up."""
    counts = report["counts"]
    lines = [
        f"replay of {report['run_id']} ({report['workflow']}@{report['version']}) from seq "
        f"{report['from_seq']}: "
        + ", ".join(f"{count} {verdict}" for verdict, count in counts.items())
        + f"; writes went to {report['namespace']} (none to the run)"
    ]
    first = report["first_divergence"]
    if first is not None:
        lines.append(f"first divergence: seq {first['seq']} {first['label']}")
    for step in report["steps"]:
        if step["verdict"] == "refused":
            lines.append(f"refused: seq {step['seq']} {step['label']}: {step['note']}")
    return lines


def _print_dry_step(step: DryStep) -> None:
    out.print(dry_step_line(step.to_dict()), markup=False, soft_wrap=True)


def dry_step_line(step: dict[str, Any]) -> str:
    """A dry run's step (``DryStep.to_dict()``), as a line."""
    output = step.get("output")
    result = (
        json.dumps(output, sort_keys=True)
        if output is not None
        else step.get("error") or step["status"]
    )
    moves = "; ".join(step["transitions"])
    effects = _effects(step["effects"])
    line = f"  {step['label']:<22} {step['status']:<10} {result}"
    return f"{line}  [{effects}]  {moves}" if effects else f"{line}  {moves}"


def dry_run_lines(found: dict[str, Any]) -> list[str]:
    """A dry run (``DryRun.to_dict()``), summed up."""
    patch = f" patched {json.dumps(found['patch'])}" if found.get("patch") else ""
    lineage = found["lineage"]
    lines = [
        f"dry run of a fork of {lineage['parent_run_id']} at seq {lineage['fork_seq']}{patch} "
        f"({found['workflow']}@{found['version']}; writes went to {found['namespace']}, none "
        "to any run): "
        f"{found['ending']}: {found['detail']}",
        f"status: {found['status']}" + (f" ({found['reason']})" if found.get("reason") else ""),
        "vars: " + json.dumps(found.get("vars"), indent=2, sort_keys=True),
    ]
    if found["effects"]:
        lines.append(
            "effects: "
            + _effects(found["effects"])
            + " (a live fork calls each under a fresh key of its own)"
        )
    return lines


def _effects(uses: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for use in uses:
        counts[use["answer"]] = counts.get(use["answer"], 0) + 1
    return ", ".join(f"{count} effect(s) {answer}" for answer, count in counts.items())
