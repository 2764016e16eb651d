"""The SLA report (``cairn sla``): per workflow, over the runs of a time window, how often
they succeed (at the first try, and at all), how long they take end to end and per step
(queue, model, tool and other time), what they spend against their budgets, and how
often and how fast their steps recover; with the SLO thresholds of the settings checked.

Two halves: :func:`read_facts` reads what the report needs (a few queries, JSON fields
picked in the database so that step outputs never leave it), and :func:`build_report`
computes the report from those facts alone, so that it can be tested on constructed rows.

Definitions (docs/operations.md explains them for operators):

- A run is in the window if it was created or finished since its start.
- Rates count the runs that ended on their own: succeeded, failed or compensated.
  Cancelled and rolled-back runs ended by someone's decision; they are counted, but in
  neither the numerator nor the denominator.
- First-try success: the run succeeded and none of its executions needed a second
  attempt (a retry) or a recovery (its worker was lost). A fallback edge the definition
  took still counts: it is a designed path, not a second try.
- End-to-end latency: created to finished, of the succeeded runs.
- Step time: from the ``timings`` of every node result (``node_succeeded``,
  ``node_failed``) of the run phase: ``queue`` (publish to claim), ``model`` and ``tool``
  (the handler's ``ctx.timed`` blocks; over the steps that timed such calls), ``other``
  (the rest of the handler's time) and ``run`` (the handler's whole time). Each has its
  own percentiles, which do not add up. Results logged before timings existed are
  counted as ``untimed``.
- Cost: per unit, what the finished runs' results charged (the same sum as the run's
  ``spent``), per run; against the run's budget (the definition's, narrowed by what a
  parent run gave it) where it has one.
- Recovery: of the run-phase executions, those recovered (the scheduler dispatched them
  again after their worker was lost) and those retried (attempt > 1). Recovery time, of
  those of them that succeeded: from the first dispatch of the execution to its success,
  that is how long its caller waited once something went wrong, including the failed
  attempts and the time it took to notice a dead worker.
- Percentiles are nearest-rank: always a value that was observed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cairn.config import EVERY_WORKFLOW, Settings
from cairn.model.statuses import RunStatus
from cairn.store.reports import (
    CHARGING_EVENTS,
    RESULT_EVENTS,
    RUN_PHASE,
    DispatchFacts,
    EventFacts,
    ExecutionFacts,
    RunFacts,
    SlaFacts,
)

# Rates leave these out: someone chose to end the run.
ENDED_BY_DECISION = frozenset({RunStatus.CANCELLED.value, RunStatus.ROLLED_BACK.value})
STEP_PARTS = ("queue", "model", "tool", "other", "run")


# -- the computation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Percentiles:
    count: int
    p50: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Iterable[float]) -> Percentiles:
        ordered = sorted(values)
        return cls(
            len(ordered),
            nearest_rank(ordered, 0.50),
            nearest_rank(ordered, 0.95),
            nearest_rank(ordered, 0.99),
        )

    def to_dict(self, digits: int = 4) -> dict[str, Any]:
        return {
            "count": self.count,
            "p50": _rounded(self.p50, digits),
            "p95": _rounded(self.p95, digits),
            "p99": _rounded(self.p99, digits),
        }


def nearest_rank(ordered: Sequence[float], q: float) -> float | None:
    """The smallest observed value with at least ``q`` of the values at or below it."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class SloThresholds:
    """Per SLO, a threshold by workflow name (``*``: every other workflow)."""

    success_rate: Mapping[str, float] = field(default_factory=dict)
    first_try_rate: Mapping[str, float] = field(default_factory=dict)
    p95_s: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> SloThresholds:
        return cls(settings.slo_success_rate, settings.slo_first_try_rate, settings.slo_p95_s)

    def for_workflow(self, workflow: str) -> dict[str, float]:
        """The thresholds that apply to ``workflow``, by SLO name."""
        applying = {}
        for slo, thresholds in (
            ("success_rate", self.success_rate),
            ("first_try_rate", self.first_try_rate),
            ("p95_s", self.p95_s),
        ):
            threshold = thresholds.get(workflow, thresholds.get(EVERY_WORKFLOW))
            if threshold is not None:
                applying[slo] = threshold
        return applying


# Rates are floors, latencies ceilings.
MINIMUM_SLOS = frozenset({"success_rate", "first_try_rate"})


@dataclass(frozen=True)
class Violation:
    slo: str
    threshold: float
    actual: float

    def to_dict(self) -> dict[str, Any]:
        return {"slo": self.slo, "threshold": self.threshold, "actual": round(self.actual, 4)}

    def describe(self) -> str:
        bound = "below the minimum" if self.slo in MINIMUM_SLOS else "above the maximum"
        return f"{self.slo} {self.actual:.4g} is {bound} {self.threshold:g}"


@dataclass(frozen=True)
class UnitCost:
    """One budget unit of a workflow's finished runs."""

    spent: float
    per_run: Percentiles
    budgeted_runs: int
    budget: float  # the budgeted runs' budgets, added up
    budget_spent: float  # what the budgeted runs spent
    budget_used: Percentiles  # per budgeted run: spent / budget
    over_budget_runs: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "spent": round(self.spent, 6),
            "per_run": self.per_run.to_dict(6),
            "budgeted_runs": self.budgeted_runs,
            "budget": round(self.budget, 6),
            "budget_spent": round(self.budget_spent, 6),
            "budget_used": self.budget_used.to_dict(),
            "over_budget_runs": self.over_budget_runs,
        }


@dataclass(frozen=True)
class Recovery:
    executions: int
    recovered: int
    retried: int
    time_s: Percentiles

    @property
    def rate(self) -> float | None:
        return _ratio(self.recovered, self.executions)

    @property
    def retry_rate(self) -> float | None:
        return _ratio(self.retried, self.executions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "executions": self.executions,
            "recovered": self.recovered,
            "rate": _rounded(self.rate, 4),
            "retried": self.retried,
            "retry_rate": _rounded(self.retry_rate, 4),
            "time_s": self.time_s.to_dict(),
        }


@dataclass(frozen=True)
class WorkflowReport:
    workflow: str
    runs: int
    statuses: Mapping[str, int]
    rated: int
    succeeded: int
    first_try: int
    latency_s: Percentiles
    steps: int
    untimed_steps: int
    step_s: Mapping[str, Percentiles]
    cost: Mapping[str, UnitCost]
    recovery: Recovery
    slo: Mapping[str, float]
    violations: tuple[Violation, ...]

    @property
    def success_rate(self) -> float | None:
        return _ratio(self.succeeded, self.rated)

    @property
    def first_try_rate(self) -> float | None:
        return _ratio(self.first_try, self.rated)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "runs": self.runs,
            "statuses": dict(sorted(self.statuses.items())),
            "rated": self.rated,
            "succeeded": self.succeeded,
            "first_try": self.first_try,
            "success_rate": _rounded(self.success_rate, 4),
            "first_try_rate": _rounded(self.first_try_rate, 4),
            "latency_s": self.latency_s.to_dict(),
            "steps": {
                "count": self.steps,
                "untimed": self.untimed_steps,
                **{part: self.step_s[part].to_dict() for part in STEP_PARTS},
            },
            "cost": {unit: cost.to_dict() for unit, cost in sorted(self.cost.items())},
            "recovery": self.recovery.to_dict(),
            "slo": dict(sorted(self.slo.items())),
            "violations": [violation.to_dict() for violation in self.violations],
        }


@dataclass(frozen=True)
class SlaReport:
    since: float
    until: float
    workflows: tuple[WorkflowReport, ...]

    @property
    def violations(self) -> list[tuple[str, Violation]]:
        return [(w.workflow, v) for w in self.workflows for v in w.violations]

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": _iso(self.since),
            "until": _iso(self.until),
            "window_s": round(self.until - self.since, 3),
            "workflows": [report.to_dict() for report in self.workflows],
            "violations": len(self.violations),
        }


def build_report(
    facts: SlaFacts, thresholds: SloThresholds, *, since: float, until: float
) -> SlaReport:
    """The report over ``facts`` (see the module's docstring for the definitions)."""
    by_workflow: dict[str, list[RunFacts]] = defaultdict(list)
    for run in facts.runs:
        by_workflow[run.workflow].append(run)
    index = _ByRun.of(facts)
    reports = tuple(
        _workflow_report(workflow, by_workflow[workflow], index, thresholds.for_workflow(workflow))
        for workflow in sorted(by_workflow)
    )
    return SlaReport(since, until, reports)


@dataclass(frozen=True)
class _ByRun:
    """The facts grouped by run id."""

    executions: Mapping[str, Sequence[ExecutionFacts]]
    events: Mapping[str, Sequence[EventFacts]]
    dispatches: Mapping[str, Sequence[DispatchFacts]]
    budgets: Mapping[tuple[str, int], Mapping[str, float]]

    @classmethod
    def of(cls, facts: SlaFacts) -> _ByRun:
        executions: dict[str, list[ExecutionFacts]] = defaultdict(list)
        for execution in facts.executions:
            executions[execution.run_id].append(execution)
        run_events: dict[str, list[EventFacts]] = defaultdict(list)
        for event in facts.events:
            run_events[event.run_id].append(event)
        dispatches: dict[str, list[DispatchFacts]] = defaultdict(list)
        for dispatch in facts.dispatches:
            dispatches[dispatch.run_id].append(dispatch)
        return cls(executions, run_events, dispatches, facts.budgets)


def _workflow_report(
    workflow: str, run_facts: Sequence[RunFacts], by_run: _ByRun, slo: Mapping[str, float]
) -> WorkflowReport:
    statuses: dict[str, int] = defaultdict(int)
    for run in run_facts:
        statuses[run.status] += 1
    finished = [run for run in run_facts if RunStatus(run.status).terminal]
    rated = [run for run in finished if run.status not in ENDED_BY_DECISION]
    succeeded = [run for run in rated if run.status == RunStatus.SUCCEEDED.value]
    first_try = [
        run
        for run in succeeded
        if all(e.attempt <= 1 and e.recoveries == 0 for e in by_run.executions.get(run.run_id, ()))
    ]
    latency = Percentiles.of(
        run.finished_at - run.created_at for run in succeeded if run.finished_at is not None
    )
    results = [
        event
        for run in run_facts
        for event in by_run.events.get(run.run_id, ())
        if event.type in RESULT_EVENTS and (event.phase or RUN_PHASE) == RUN_PHASE
    ]
    timed = [split_step_time(event.timings) for event in results if event.timings]
    report = WorkflowReport(
        workflow=workflow,
        runs=len(run_facts),
        statuses=dict(statuses),
        rated=len(rated),
        succeeded=len(succeeded),
        first_try=len(first_try),
        latency_s=latency,
        steps=len(results),
        untimed_steps=len(results) - len(timed),
        step_s={
            part: Percentiles.of(split[part] for split in timed if part in split)
            for part in STEP_PARTS
        },
        cost=_cost(finished, by_run),
        recovery=_recovery(run_facts, by_run),
        slo=slo,
        violations=(),
    )
    return replace(report, violations=check_slos(report, slo))


def split_step_time(timings: Mapping[str, float]) -> dict[str, float]:
    """One step's time by part, for the parts it has: ``model`` and ``tool`` only if the
    handler timed such calls (a step that never calls a model says nothing about model
    latency); ``other`` is the handler's time outside them (never below zero: blocks in
    parallel threads may add up to more than the handler took)."""
    split = {part: timings[part] for part in STEP_PARTS if part in timings}
    if "run" in timings:
        outside = timings["run"] - timings.get("model", 0.0) - timings.get("tool", 0.0)
        split["other"] = max(0.0, outside)
    return split


def _cost(finished: Sequence[RunFacts], by_run: _ByRun) -> dict[str, UnitCost]:
    spent_by_run: list[dict[str, float]] = []
    budget_by_run: list[dict[str, float]] = []
    for run in finished:
        spent: dict[str, float] = defaultdict(float)
        given: Mapping[str, float] | None = None
        for event in by_run.events.get(run.run_id, ()):
            if event.type in CHARGING_EVENTS:
                for unit, amount in (event.charges or {}).items():
                    spent[unit] += amount
            elif event.type == "run_started":
                given = event.budget
        spent_by_run.append(dict(spent))
        definition = by_run.budgets.get((run.workflow, run.version))
        budget_by_run.append(run_budget(definition, given))
    units = sorted({unit for amounts in (*spent_by_run, *budget_by_run) for unit in amounts})
    cost = {}
    for unit in units:
        budgeted = [
            (spent.get(unit, 0.0), budget[unit])
            for spent, budget in zip(spent_by_run, budget_by_run, strict=True)
            if unit in budget
        ]
        cost[unit] = UnitCost(
            spent=sum(spent.get(unit, 0.0) for spent in spent_by_run),
            per_run=Percentiles.of(spent.get(unit, 0.0) for spent in spent_by_run),
            budgeted_runs=len(budgeted),
            budget=sum(limit for _, limit in budgeted),
            budget_spent=sum(amount for amount, _ in budgeted),
            # A zero budget has no share to speak of: it is over, or not, and that is all.
            budget_used=Percentiles.of(amount / limit for amount, limit in budgeted if limit),
            over_budget_runs=sum(1 for amount, limit in budgeted if amount > limit),
        )
    return cost


def run_budget(
    definition: Mapping[str, float] | None, given: Mapping[str, float] | None
) -> dict[str, float]:
    """A run's budget, as the decider enforces it: the definition's, narrowed unit by unit
    by what a parent run gave it (see cairn.decider.budget.run_limits)."""
    budget = dict(definition or {})
    for unit, amount in (given or {}).items():
        budget[unit] = min(amount, budget.get(unit, amount))
    return budget


def _recovery(run_facts: Sequence[RunFacts], by_run: _ByRun) -> Recovery:
    count = recovered = retried = 0
    times: list[float] = []
    for run in run_facts:
        for execution in by_run.executions.get(run.run_id, ()):
            if execution.phase != RUN_PHASE:
                continue
            count += 1
            recovered += int(execution.recoveries > 0)
            retried += int(execution.attempt > 1)
            troubled = execution.recoveries > 0 or execution.attempt > 1
            if troubled and execution.status == "succeeded":
                taken = recovery_time(
                    execution,
                    by_run.events.get(run.run_id, ()),
                    by_run.dispatches.get(run.run_id, ()),
                )
                if taken is not None:
                    times.append(taken)
    return Recovery(count, recovered, retried, Percentiles.of(times))


def recovery_time(
    execution: ExecutionFacts,
    run_events: Iterable[EventFacts],
    run_dispatches: Iterable[DispatchFacts],
) -> float | None:
    """From the execution's first dispatch to its success, seconds. A step fused onto the
    one before it was never dispatched on its own: its first failure starts the clock."""
    key = (execution.node, execution.iteration)
    mine = [
        event
        for event in run_events
        if (event.node, event.iteration) == key and (event.phase or RUN_PHASE) == RUN_PHASE
    ]
    successes = [event.at for event in mine if event.type == "node_succeeded"]
    if not successes:
        return None
    succeeded_at = max(successes)
    starts = [d.at for d in run_dispatches if (d.node, d.iteration) == key]
    starts = starts or [event.at for event in mine if event.type == "node_failed"]
    starts = [at for at in starts if at <= succeeded_at]
    if not starts:
        return None
    return succeeded_at - min(starts)


def check_slos(report: WorkflowReport, slo: Mapping[str, float]) -> tuple[Violation, ...]:
    """The SLOs ``report`` breaks; an SLO with nothing to measure (no finished run) holds."""
    actual = {
        "success_rate": report.success_rate,
        "first_try_rate": report.first_try_rate,
        "p95_s": report.latency_s.p95,
    }
    violations = []
    for name, threshold in sorted(slo.items()):
        value = actual[name]
        if value is None:
            continue
        broken = value < threshold if name in MINIMUM_SLOS else value > threshold
        if broken:
            violations.append(Violation(name, threshold, value))
    return tuple(violations)


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
