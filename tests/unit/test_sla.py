"""The SLA report: ``ctx.timed``'s kinds and what an execution's timings carry, the
timings on result events, and the report computed from constructed facts (rates,
percentiles, step time, cost, recoveries, SLOs, JSON). Blocks timed on the wall clock,
and the whole path on the embedded default: tests/embedded/test_sla.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cairn.config import Settings
from cairn.errors import ConfigError
from cairn.model.events import (
    NodeFailed,
    NodeSucceeded,
    event_from_dict,
    event_to_dict,
)
from cairn.model.state import RunState
from cairn.observe.sla import (
    DispatchFacts,
    EventFacts,
    ExecutionFacts,
    Percentiles,
    RunFacts,
    SlaFacts,
    SloThresholds,
    build_report,
    nearest_rank,
    run_budget,
    split_step_time,
)
from cairn.workers.context import StepContext

T0 = 1_000_000.0


def context(queued_s: float | None = None) -> StepContext:
    return StepContext(
        run_id="r",
        workflow="w",
        node="n",
        iteration=1,
        attempt=1,
        phase="run",
        state=RunState("r", "w", 1),
        queued_s=queued_s,
    )


# -- ctx.timed -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["", "queue", "run"])
def test_the_workers_own_kinds_are_refused(kind: str) -> None:
    with pytest.raises(ValueError, match=r"ctx\.timed"), context().timed(kind):
        pass


def test_execution_timings_carry_run_and_queue_when_known() -> None:
    ctx = context(queued_s=0.25)
    with ctx.timed("model"):
        pass
    timings = ctx.execution_timings(1.5)
    assert set(timings) == {"model", "run", "queue"}
    assert (timings["run"], timings["queue"]) == (1.5, 0.25)
    assert "queue" not in context().execution_timings(1.0)


# -- events ------------------------------------------------------------------------------------


def test_timings_travel_on_result_events_and_are_left_out_when_unset() -> None:
    succeeded = NodeSucceeded(at=1.0, node="a", timings={"run": 0.5, "model": 0.25})
    failed = NodeFailed(at=1.0, node="a", message="503", timings={"run": 0.1})
    for event in (succeeded, failed):
        assert event_from_dict(event_to_dict(event)) == event
    assert "timings" not in event_to_dict(NodeSucceeded(at=1.0, node="a"))


def test_events_from_before_timings_still_load() -> None:
    old_succeeded = {"type": "node_succeeded", "at": 1.0, "node": "a", "charges": None}
    old_failed = {"type": "node_failed", "at": 1.0, "node": "a", "message": "x"}
    assert event_from_dict(old_succeeded) == NodeSucceeded(at=1.0, node="a")
    assert event_from_dict(old_failed).timings is None  # type: ignore[attr-defined]


# -- percentiles and splits ------------------------------------------------------------------


def test_percentiles_are_nearest_rank() -> None:
    values = Percentiles.of(float(v) for v in range(100, 0, -1))
    assert (values.count, values.p50, values.p95, values.p99) == (100, 50.0, 95.0, 99.0)
    assert Percentiles.of([7.0]).p99 == 7.0
    assert Percentiles.of([]) == Percentiles(0, None, None, None)
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0  # an observed value, never 2.5


def test_a_step_splits_into_queue_model_tool_and_other() -> None:
    split = split_step_time({"queue": 0.1, "run": 1.0, "model": 0.6, "tool": 0.3, "tool:x": 0.3})
    assert split == pytest.approx(
        {"queue": 0.1, "run": 1.0, "model": 0.6, "tool": 0.3, "other": 0.1}
    )
    assert split_step_time({"run": 0.2}) == {"run": 0.2, "other": 0.2}  # no model, no tool
    assert split_step_time({"run": 0.2, "tool": 0.5})["other"] == 0.0  # threads: never < 0


def test_a_budget_is_the_definitions_narrowed_by_the_parents() -> None:
    assert run_budget({"tokens": 1000, "usd": 1}, {"tokens": 400}) == {"tokens": 400, "usd": 1}
    assert run_budget(None, {"calls": 3}) == {"calls": 3}
    assert run_budget(None, None) == {}


# -- the report --------------------------------------------------------------------------------


def run(run_id: str, status: str, took: float | None = 10.0, workflow: str = "agent") -> RunFacts:
    return RunFacts(run_id, workflow, 1, status, T0, T0 + took if took is not None else None)


def execution(run_id: str, node: str, attempt: int = 1, recoveries: int = 0) -> ExecutionFacts:
    return ExecutionFacts(run_id, node, 1, "run", "succeeded", attempt, recoveries)


def result(
    run_id: str, node: str, at: float, kind: str = "node_succeeded", **data: Any
) -> EventFacts:
    return EventFacts(run_id, kind, T0 + at, node=node, iteration=1, phase="run", **data)


def facts() -> SlaFacts:
    """Six runs of ``agent``: a clean one, one retried, one recovered, one failed, one
    cancelled and one still running; and a clean run of ``report``."""
    runs = [
        run("clean", "succeeded", 10.0),
        run("retried", "succeeded", 30.0),
        run("recovered", "succeeded", 90.0),
        run("failed", "failed", 5.0),
        run("cancelled", "cancelled", 1.0),
        run("running", "running", None),
        run("other", "succeeded", 2.0, workflow="report"),
    ]
    executions = [
        execution("clean", "plan"),
        execution("clean", "search"),
        execution("retried", "plan"),
        execution("retried", "search", attempt=2),
        execution("recovered", "plan", recoveries=1),
        ExecutionFacts("failed", "plan", 1, "run", "failed", 1, 0),
        # A compensation is not a step of the workflow's own path.
        ExecutionFacts("failed", "plan", 1, "compensate", "succeeded", 1, 0),
        execution("other", "write"),
    ]
    timings = {"queue": 0.01, "run": 2.0, "model": 1.5}
    events = [
        EventFacts("clean", "run_started", T0),
        result("clean", "plan", 3.0, timings=timings, charges={"tokens": 300}),
        result("clean", "search", 6.0, timings={"queue": 0.03, "run": 1.0, "tool": 0.8}),
        EventFacts("retried", "run_started", T0, budget={"tokens": 500}),
        result("retried", "plan", 2.0, timings=timings, charges={"tokens": 600}),
        result("retried", "search", 4.0, "node_failed", timings={"queue": 0.02, "run": 1.0}),
        result("retried", "search", 25.0, timings={"queue": 0.05, "run": 1.0, "tool": 0.9}),
        EventFacts("recovered", "run_started", T0),
        result("recovered", "plan", 80.0, charges={"tokens": 100}),  # logged before timings
        EventFacts("failed", "run_started", T0),
        result("failed", "plan", 4.0, "node_failed", timings=timings, charges={"tokens": 50}),
        EventFacts(
            "failed",
            "node_succeeded",
            T0 + 4.5,
            node="plan",
            iteration=1,
            phase="compensate",
            timings={"run": 9.0},
            charges={"tokens": 10},
        ),
        EventFacts("other", "run_started", T0),
        result("other", "write", 1.0, timings={"queue": 0.5, "run": 0.4, "model": 0.3}),
    ]
    dispatches = [
        DispatchFacts("retried", "search", 1, T0 + 2.0),
        DispatchFacts("retried", "search", 1, T0 + 14.0),  # the retry's
        DispatchFacts("recovered", "plan", 1, T0 + 0.5),
    ]
    return SlaFacts(runs, executions, events, dispatches, {("agent", 1): {"tokens": 1000}})


def report(thresholds: SloThresholds | None = None) -> dict[str, Any]:
    built = build_report(facts(), thresholds or SloThresholds(), since=T0 - 60, until=T0 + 3600)
    return {item.workflow: item for item in built.workflows}


def test_rates_count_the_runs_that_ended_on_their_own() -> None:
    agent = report()["agent"]
    assert agent.runs == 6
    assert dict(agent.statuses) == {
        "succeeded": 3,
        "failed": 1,
        "cancelled": 1,
        "running": 1,
    }
    assert (agent.rated, agent.succeeded, agent.first_try) == (4, 3, 1)
    assert agent.success_rate == 0.75
    assert agent.first_try_rate == 0.25  # "retried" needed attempt 2, "recovered" a recovery


def test_end_to_end_latency_is_of_the_succeeded_runs() -> None:
    latency = report()["agent"].latency_s
    assert (latency.count, latency.p50, latency.p95, latency.p99) == (3, 30.0, 90.0, 90.0)


def test_step_time_comes_from_the_run_phase_results_with_timings() -> None:
    agent = report()["agent"]
    assert (agent.steps, agent.untimed_steps) == (7, 1)  # the old event, untimed
    step = agent.step_s
    assert step["run"].count == 6 and step["run"].p99 == 2.0  # not the compensation's 9 s
    assert step["model"].count == 3 and step["model"].p50 == 1.5  # steps that called one
    assert step["tool"].count == 2 and step["tool"].p95 == 0.9
    assert step["queue"].p95 == 0.05
    # 0.5 per plan (2.0 - 1.5), 0.2 and 0.1 for the searches, 1.0 for the failed one.
    assert (step["other"].p50, step["other"].p95) == pytest.approx((0.5, 1.0))


def test_cost_is_what_the_finished_runs_charged_against_their_budgets() -> None:
    tokens = report()["agent"].cost["tokens"]
    # clean 300, retried 600, recovered 100, failed 50 + 10 (its compensation); cancelled 0.
    assert tokens.spent == 1060
    assert tokens.per_run.count == 5 and tokens.per_run.p50 == 100
    assert tokens.budgeted_runs == 5
    assert tokens.budget == 4 * 1000 + 500  # "retried" got 500 from its parent
    assert tokens.over_budget_runs == 1  # "retried": 600 of 500
    assert tokens.budget_used.p99 == pytest.approx(1.2)
    assert report()["report"].cost == {}


def test_recovery_rate_and_time() -> None:
    recovery = report()["agent"].recovery
    assert (recovery.executions, recovery.recovered, recovery.retried) == (6, 1, 1)
    assert recovery.rate == pytest.approx(1 / 6)
    # "retried": first dispatched at 2 s, succeeded at 25 s; "recovered": 0.5 s to 80 s.
    assert recovery.time_s.count == 2
    assert (recovery.time_s.p50, recovery.time_s.p99) == (23.0, 79.5)


def test_a_step_fused_onto_the_one_before_it_is_timed_from_its_first_failure() -> None:
    fused = SlaFacts(
        [run("fused", "succeeded")],
        [execution("fused", "b", attempt=2)],
        [
            result("fused", "b", 3.0, "node_failed"),
            result("fused", "b", 7.5),
        ],
    )
    built = build_report(fused, SloThresholds(), since=T0, until=T0 + 60)
    assert built.workflows[0].recovery.time_s.p50 == 4.5


def test_slos_are_flagged_per_workflow_with_overrides() -> None:
    thresholds = SloThresholds(
        success_rate={"*": 0.7},
        first_try_rate={"*": 0.9, "agent": 0.2},
        p95_s={"*": 60.0, "report": 1.0},
    )
    by_name = report(thresholds)
    agent, other = by_name["agent"], by_name["report"]
    assert dict(agent.slo) == {"success_rate": 0.7, "first_try_rate": 0.2, "p95_s": 60.0}
    assert [(v.slo, v.threshold, v.actual) for v in agent.violations] == [("p95_s", 60.0, 90.0)]
    assert [(v.slo, v.actual) for v in other.violations] == [("p95_s", 2.0)]
    assert "above the maximum" in other.violations[0].describe()


def test_an_slo_with_nothing_to_measure_holds() -> None:
    idle = SlaFacts([run("running", "running", None), run("gone", "cancelled", 1.0)])
    thresholds = SloThresholds(success_rate={"*": 0.99}, p95_s={"*": 1.0})
    built = build_report(idle, thresholds, since=T0, until=T0 + 60)
    assert built.violations == []
    assert built.workflows[0].success_rate is None


def test_the_json_is_stable_and_strict() -> None:
    built = build_report(
        facts(), SloThresholds(first_try_rate={"*": 0.5}), since=T0 - 60, until=T0 + 3600
    )
    data = json.loads(json.dumps(built.to_dict(), allow_nan=False))
    assert list(data) == ["since", "until", "window_s", "workflows", "violations"]
    assert data["violations"] == 1 and data["window_s"] == 3660
    agent = data["workflows"][0]
    assert [w["workflow"] for w in data["workflows"]] == ["agent", "report"]
    assert list(agent) == [
        "workflow",
        "runs",
        "statuses",
        "rated",
        "succeeded",
        "first_try",
        "success_rate",
        "first_try_rate",
        "latency_s",
        "steps",
        "cost",
        "recovery",
        "slo",
        "violations",
    ]
    assert list(agent["steps"]) == ["count", "untimed", "queue", "model", "tool", "other", "run"]
    assert agent["latency_s"] == {"count": 3, "p50": 30.0, "p95": 90.0, "p99": 90.0}
    assert agent["violations"] == [{"slo": "first_try_rate", "threshold": 0.5, "actual": 0.25}]
    assert set(agent["recovery"]) == {
        "executions",
        "recovered",
        "rate",
        "retried",
        "retry_rate",
        "time_s",
    }
    assert data["workflows"][1]["steps"]["tool"] == {
        "count": 0,
        "p50": None,
        "p95": None,
        "p99": None,
    }


# -- settings ----------------------------------------------------------------------------------


def test_slo_settings_take_a_default_and_per_workflow_overrides() -> None:
    settings = Settings.from_env(
        {
            "CAIRN_SLO_SUCCESS_RATE": "0.99, weekly_report=0.9",
            "CAIRN_SLO_FIRST_TRY_RATE": "agent=0.8",
            "CAIRN_SLO_P95_S": "30",
        }
    )
    thresholds = SloThresholds.from_settings(settings)
    assert thresholds.for_workflow("weekly_report") == {"success_rate": 0.9, "p95_s": 30.0}
    assert thresholds.for_workflow("agent") == {
        "success_rate": 0.99,
        "first_try_rate": 0.8,
        "p95_s": 30.0,
    }
    assert Settings().slo_p95_s == {}


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("CAIRN_SLO_SUCCESS_RATE", "1.5", "between 0 and 1"),
        ("CAIRN_SLO_FIRST_TRY_RATE", "a=0.5,a=0.6", "given twice"),
        ("CAIRN_SLO_SUCCESS_RATE", "=0.5", "names no workflow"),
        ("CAIRN_SLO_P95_S", "0", "positive"),
        ("CAIRN_SLO_P95_S", "soon", "valid number"),
    ],
)
def test_bad_slo_settings_are_refused(variable: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        Settings.from_env({variable: value})
