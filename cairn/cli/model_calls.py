"""``cairn calls RUN``: what a run's model calls sent and were answered."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, out
from cairn.cli.deployment import deployment


@app.command("calls")
def calls(
    run_id: Annotated[str, typer.Argument(help="A run.")],
    node: Annotated[str | None, typer.Option(help="Only this node's calls.")] = None,
    show: Annotated[
        int | None,
        typer.Option(help="Print the N-th call listed (from 0): every message, then its answer."),
    ] = None,
    history: Annotated[
        bool, typer.Option("--history", help="With --show: the whole conversation passed.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List a run's recorded model calls: node, index, attempt, model, messages sent (and
    passed, when a context budget compacted them), tokens, latency and the answer."""
    from rich.table import Table

    if remote.active():
        with remote.api() as api:
            view = api.model_calls(run_id, node).model_dump()
    else:
        from cairn.observe.model_calls import model_calls_view

        with deployment() as opened:
            opened.orchestrator.get_run(run_id)  # an unknown run is an error, not []
            view = model_calls_view(opened.store, run_id, node)
    if as_json:
        print(json.dumps(view, indent=2))
        return
    if show is not None:
        _show(view, show, history)
        return
    table = Table("#", "node", "call", "attempt", "model", "messages", "tokens", "s", "answer")
    for number, call in enumerate(view["calls"]):
        sent = str(len(call["messages"]))
        if call["history"] is not None:
            sent = f"{sent} of {len(call['history'])}"
        table.add_row(
            str(number),
            f"{call['node']}#{call['iteration']}",
            str(call["call"]),
            str(call["attempt"]),
            str(call["model"] or call["provider"]),
            sent,
            _tokens(call["usage"]),
            f"{call['latency_s']:.2f}",
            _snippet(call["text"]),
        )
    out.print(table)


def _show(view: dict[str, Any], number: int, history: bool) -> None:
    from rich.text import Text

    listed = view["calls"]
    if not 0 <= number < len(listed):
        raise typer.BadParameter(f"the run has {len(listed)} recorded calls", param_hint="--show")
    call = listed[number]
    digests = call["history"] if history and call["history"] is not None else call["messages"]
    for digest in digests:
        message = view["messages"].get(digest)
        role = message.get("role", message.get("type")) if isinstance(message, dict) else None
        out.print(Text(str(role or "input"), style="bold"), Text(_content(message)), sep="\n")
    out.print(Text("answer", style="bold"), Text(call["text"]), sep="\n")


def _content(message: Any) -> str:
    if not isinstance(message, dict):
        return str(message)
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content if content is not None else message, ensure_ascii=False)


def _tokens(usage: dict[str, Any] | None) -> str:
    if not usage:
        return ""
    from cairn.model.usage import usage_counts

    spent_in, spent_out, cached = usage_counts(usage)
    return f"{spent_in}+{spent_out}" + (f" ({cached} cached)" if cached else "")


def _snippet(text: str, width: int = 50) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
