"""Commands that travel a run's timeline, read-only: history, state, diff, bisect —
through the HTTP API in remote mode (:mod:`cairn.cli.remote`), else from the database.
Either way the renderers below get the engine's JSON forms (``History.to_dict()``,
``plain(state)``, ``Change.to_dict()``, ``Bisection.to_dict()``), which the API serves."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, cwd_importable, out
from cairn.cli.deployment import deployment
from cairn.cli.views import step_of

if TYPE_CHECKING:
    from cairn.timetravel.bisection import Check
    from cairn.timetravel.steps import Step

EXIT_NOT_FOUND = 1  # bisect: no step to blame (fails from the start, or never fails)
SHORT_DIGEST = 12


@app.command()
def history(
    run_id: Annotated[str, typer.Argument()],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Every step of a run: its seq, node, visit, attempt, phase, inputs and outputs
    digests, duration, and any retry, recovery, hold or compensation; the run's other
    events (signals, timers, cancel, rollback, recoveries) in between."""
    if remote.active():
        with remote.api() as client:
            found = client.history(run_id).model_dump()
    else:
        with deployment() as opened:
            found = opened.timeline(run_id).history().to_dict()
    if as_json:
        print(json.dumps(found, indent=2))
        return
    for line in history_lines(found):
        out.print(line, markup=False, soft_wrap=True)


@app.command()
def state(
    run_id: Annotated[str, typer.Argument()],
    at: Annotated[
        int | None, typer.Option("--at", help="After this event (see cairn history); default: now.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """The run's full state after event SEQ: the latest snapshot at or before it plus the
    events since, replayed through the decider (nothing runs again)."""
    if remote.active():
        with remote.api() as client:
            found = client.state(run_id, at).state
    else:
        from cairn.timetravel.diff import plain

        with deployment() as opened:
            found = plain(opened.timeline(run_id).state_at(at))
    if as_json:
        print(json.dumps(found, indent=2))
        return
    where = f"seq {at}" if at is not None else "its latest seq"
    out.print(f"{run_id} at {where}: {found['status']}", markup=False)
    out.print("vars: " + json.dumps(found["vars"], indent=2), markup=False, soft_wrap=True)
    for name, node in found["nodes"].items():
        error = f": {node['error']}" if node.get("error") else ""
        out.print(
            f"  {name}#{node['iteration']} {node['status']} (attempt {node['attempt']}){error}",
            markup=False,
            soft_wrap=True,
        )
    for timer in found["timers"].values():
        out.print(f"  timer {timer['timer_id']} due {_clock(timer['due_at'])}", markup=False)
    if found["messages"]:
        out.print(f"messages: {len(found['messages'])}", markup=False)
    if found["spent"]:
        out.print(f"spent: {json.dumps(found['spent'])}", markup=False)
    if found.get("patches"):  # the run's answers to ctx.patched
        answers = ", ".join(f"{p}={str(a).lower()}" for p, a in sorted(found["patches"].items()))
        out.print(f"patches: {answers}", markup=False, soft_wrap=True)
    if found["reason"]:
        out.print(f"reason: {found['reason']}", markup=False, soft_wrap=True)


@app.command()
def diff(
    run_id: Annotated[str, typer.Argument()],
    from_seq: Annotated[int, typer.Option("--from", help="The earlier seq.")],
    to_seq: Annotated[int, typer.Option("--to", help="The later seq.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """What changed in the run's state from after event --from to after event --to."""
    from cairn.cli.render import change_lines

    if remote.active():
        with remote.api() as client:
            changes = client.diff(run_id, from_seq, to_seq).changes
    else:
        with deployment() as opened:
            changes = [c.to_dict() for c in opened.timeline(run_id).diff(from_seq, to_seq)]
    if as_json:
        print(json.dumps(changes, indent=2))
        return
    if not changes:
        out.print(f"no change from seq {from_seq} to seq {to_seq}", markup=False)
    for line in change_lines(changes):
        out.print(line, markup=False, soft_wrap=True)


@app.command()
def bisect(
    run_id: Annotated[str, typer.Argument()],
    check: Annotated[
        str,
        typer.Option(
            "--check",
            help="module:function, called with the state (as cairn state --json prints it); "
            "truthy means good.",
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Binary-search the run's steps for the first one after which --check fails (it
    must hold at the start and, once failed, stay failed); print each check and that
    step with its input and output. Exit 1 if no step is to blame: it fails from the
    start, or it never fails."""
    from cairn.timetravel.bisection import Verdict, load_predicate

    cwd_importable()
    predicate = load_predicate(check)
    on_check = None if as_json else _print_check
    if remote.active():
        from cairn.cli.remote_bisect import bisect_over_http

        with remote.api() as client:
            found = bisect_over_http(client, run_id, predicate, on_check)
    else:
        with deployment() as opened:
            found = opened.timeline(run_id).bisect(predicate, on_check=on_check).to_dict()
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        for line in bisection_lines(found):
            out.print(line, markup=False, soft_wrap=True)
    if found["verdict"] != Verdict.FOUND:
        raise typer.Exit(EXIT_NOT_FOUND)


# -- text forms -----------------------------------------------------------------------------


def history_lines(found: dict[str, Any]) -> list[str]:
    """``History.to_dict()``, as lines."""
    steps = [step_of(step) for step in found["steps"]]
    lines = [
        f"{found['run_id']}  {found['workflow']}@{found['version']}  {found['status']}: "
        f"{len(steps)} step(s) in {found['last_seq']} event(s)",
        f"{'seq':>5}  {'step':<22} {'status':<10} {'inputs':<12} {'outputs':<12} "
        f"{'duration':>9}  notes",
    ]
    entries: list[tuple[int, str]] = [(step.seq, _step_line(step)) for step in steps]
    entries += [(e["seq"], f"{e['seq']:>5}  · {e['summary']}") for e in found["events"]]
    lines += [line for _seq, line in sorted(entries, key=lambda entry: entry[0])]
    return lines


def _step_line(step: Step) -> str:
    outputs = (step.outputs_digest or "-")[:SHORT_DIGEST]
    duration = "" if step.duration_s is None else _duration(step.duration_s, step.duration_from)
    notes = ", ".join(step.marks)
    if step.error:
        notes = f"{notes}; {step.error}" if notes else step.error
    return (
        f"{step.seq:>5}  {step.label:<22} {step.status:<10} "
        f"{step.inputs_digest[:SHORT_DIGEST]:<12} {outputs:<12} {duration:>9}  {notes}"
    ).rstrip()


def _duration(seconds: float, measured_by: str | None) -> str:
    # The log's measure runs from dispatch to result: it includes the wait for a worker.
    approximate = "~" if measured_by == "log" else ""
    if seconds < 0.001:
        return f"{approximate}{seconds * 1_000_000:.0f} µs"
    if seconds < 0.01:
        return f"{approximate}{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{approximate}{seconds * 1000:.0f} ms"
    return f"{approximate}{seconds:.2f} s"


def bisection_lines(found: dict[str, Any]) -> list[str]:
    """``Bisection.to_dict()``, as lines."""
    from cairn.cli.render import change_lines
    from cairn.timetravel.bisection import Verdict

    checks = f"{len(found['checks'])} check(s)"
    verdict = found["verdict"]
    if verdict == Verdict.NO_STEPS:
        return [f"run {found['run_id']} has no step yet: nothing to bisect"]
    if verdict == Verdict.NEVER_FAILS:
        return [f"the predicate holds after every step ({checks}): no step to blame"]
    if verdict == Verdict.FAILS_AT_START:
        return [f"the predicate fails before the first step already ({checks}): no step to blame"]
    step = step_of(found["step"])
    lines = [
        f"first bad step ({checks}): seq {step.seq} {step.label} {step.event} ({step.status})",
        "input: " + json.dumps(found["input"]["vars"], indent=2),
    ]
    if step.error:
        lines.append(f"error: {step.error}")
    else:
        lines.append("output: " + json.dumps(found["output"], indent=2))
    lines.append("changed:")
    lines += [f"  {line}" for line in change_lines(found["changes"])]
    return lines


def _print_check(check: Check) -> None:
    verdict = "good" if check.ok else "bad"
    out.print(f"check seq {check.seq:>5}  {check.label:<22} {verdict}", markup=False)


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
