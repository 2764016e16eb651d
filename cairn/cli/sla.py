"""``cairn sla``: the SLA report of a time window, as tables for people or JSON for
machines; exit 1 when a workflow violates an SLO, so that a CronJob running it fails
visibly (see docs/operations.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from cairn.cli import remote
from cairn.cli._app import app, err, out

if TYPE_CHECKING:
    from rich.table import Table

    from cairn.config import Settings
    from cairn.observe.sla import Percentiles, SlaReport
from cairn.errors import InvalidInput
from cairn.model.durations import format_duration, parse_duration

EXIT_SLO_VIOLATED = 1


@app.command()
def sla(
    since: Annotated[
        str,
        typer.Option(help="The window: runs created or finished within this long (24h, 7d)."),
    ] = "24h",
    workflow: Annotated[str | None, typer.Option(help="Only this workflow.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Per workflow: success rates (first try, with retries), latency (end to end; per
    step: queue, model, tool, other), cost against budget, recoveries; SLOs from
    CAIRN_SLO_* checked, exit 1 if any is violated."""
    from cairn.config import Settings

    remote.direct_only("sla", "the report reads the database's facts directly")
    try:
        window = parse_duration(since)
    except ValueError as exc:
        raise InvalidInput(f"--since: {exc}") from exc
    settings = Settings.from_env()
    report = sla_report(settings, window.total_seconds(), workflow)
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _show(report, format_duration(window))
    if report.violations:
        raise typer.Exit(EXIT_SLO_VIOLATED)


def sla_report(settings: Settings, window_s: float, workflow: str | None = None) -> SlaReport:
    """The report of the last ``window_s`` seconds, by the database's clock. Reads the
    store only: no workflow code is imported, nothing is registered."""
    from cairn.observe.sla import SloThresholds, build_report
    from cairn.store.backends import store_for
    from cairn.store.database import make_engine, upgrade
    from cairn.store.reports import read_facts

    engine = make_engine(settings.effective_database_url)
    try:
        if settings.database_url is None:
            upgrade(engine)  # the embedded database migrates itself, as its runtime does
        with store_for(engine).reading() as tx:
            until = tx.now()
            since = until - window_s
            facts = read_facts(tx, since, workflow)
    finally:
        engine.dispose()
    return build_report(facts, SloThresholds.from_settings(settings), since=since, until=until)


def _show(report: SlaReport, window: str) -> None:
    if not report.workflows:
        out.print(f"no runs created or finished in the last {window}", markup=False)
        return
    out.print(_outcomes(report, window))
    out.print(_step_times(report))
    costs = _costs(report)
    if costs.rows:
        out.print(costs)
    for name, violation in report.violations:
        err.print(f"[red]SLO violated[/red] {name}: {violation.describe()}", highlight=False)
    if not report.violations:
        checked = sum(1 for item in report.workflows if item.slo)
        out.print(
            f"SLOs met ({checked} of {len(report.workflows)} workflow(s) have SLOs)"
            if checked
            else "no SLOs set (CAIRN_SLO_SUCCESS_RATE, CAIRN_SLO_FIRST_TRY_RATE, CAIRN_SLO_P95_S)",
            markup=False,
        )


def _outcomes(report: SlaReport, window: str) -> Table:
    from rich.table import Table

    outcomes = Table(
        "workflow",
        "runs",
        "ok / failed / other",
        "first try",
        "with retries",
        "latency p50 / p95 / p99",
        "recovered",
        "retried",
        "recovery p95",
        title=f"SLA, last {window}",
    )
    for item in report.workflows:
        failed = sum(item.statuses.get(s, 0) for s in ("failed", "compensated"))
        outcomes.add_row(
            item.workflow,
            str(item.runs),
            f"{item.succeeded} / {failed} / {item.runs - item.succeeded - failed}",
            _percent(item.first_try_rate),
            _percent(item.success_rate),
            _spread(item.latency_s),
            _percent(item.recovery.rate),
            _percent(item.recovery.retry_rate),
            _seconds(item.recovery.time_s.p95),
        )
    return outcomes


def _step_times(report: SlaReport) -> Table:
    from rich.table import Table

    from cairn.observe.sla import STEP_PARTS

    steps = Table("workflow", "steps", *STEP_PARTS, title="Step time p50 / p95 / p99")
    for item in report.workflows:
        steps.add_row(
            item.workflow,
            f"{item.steps}" + (f" ({item.untimed_steps} untimed)" if item.untimed_steps else ""),
            *(_spread(item.step_s[part]) for part in STEP_PARTS),
        )
    return steps


def _costs(report: SlaReport) -> Table:
    from rich.table import Table

    costs = Table(
        "workflow",
        "unit",
        "spent",
        "per run p50 / p95",
        "of budget p50 / p95",
        "over budget",
        title="Cost (finished runs)",
    )
    for item in report.workflows:
        for unit, cost in sorted(item.cost.items()):
            used = cost.budget_used
            costs.add_row(
                item.workflow,
                unit,
                f"{cost.spent:g}",
                f"{_number(cost.per_run.p50)} / {_number(cost.per_run.p95)}",
                f"{_percent(used.p50)} / {_percent(used.p95)}" if cost.budgeted_runs else "-",
                f"{cost.over_budget_runs} of {cost.budgeted_runs}" if cost.budgeted_runs else "-",
            )
    return costs


def _spread(values: Percentiles) -> str:
    if not values.count:
        return "-"
    return " / ".join(_seconds(value) for value in (values.p50, values.p95, values.p99))


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 0.01:
        return f"{value * 1000:.1f}ms"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
