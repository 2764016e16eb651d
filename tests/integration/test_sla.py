"""`cairn sla` on real PostgreSQL, Redis and a Celery worker: steps that time their model
and tool calls, one that fails transiently once and one for good; the report's rates,
step time, cost and recoveries, and an SLO violation that makes it exit 1."""

from __future__ import annotations

import json
from typing import Any

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster


def sla(cluster: Cluster, *args: str, **slo: str) -> tuple[int, dict[str, Any]]:
    """Run `cairn sla --json` as an operator's CronJob would: its own process, settings
    from the environment."""
    done = cluster.cli("sla", "--json", *args, env=slo)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_cairn_sla_reports_rates_step_time_cost_and_flags_a_violated_slo(
    cluster: Cluster,
) -> None:
    cluster.worker(concurrency=2)
    cluster.scheduler()  # the retry's durable timer
    timed = {"model_s": 0.1, "tool_s": 0.05}
    run_ids = [
        cluster.submit("sla_agent", {**timed, **extra})
        for extra in ({}, {}, {"succeed_on": 2}, {"permanent": True})
    ]
    statuses = [cluster.wait(run_id, timeout_s=30).status for run_id in run_ids]
    assert statuses == [RunStatus.SUCCEEDED] * 3 + [RunStatus.FAILED], cluster.log_tails()

    code, report = sla(
        cluster,
        "--since",
        "10m",
        CAIRN_SLO_SUCCESS_RATE="0.7",
        CAIRN_SLO_FIRST_TRY_RATE="0.9",
        CAIRN_SLO_P95_S="60",
    )
    assert code == 1
    assert report["violations"] == 1
    (agent,) = report["workflows"]
    assert agent["workflow"] == "sla_agent"
    assert (agent["runs"], agent["statuses"]) == (4, {"failed": 1, "succeeded": 3})
    assert (agent["success_rate"], agent["first_try_rate"]) == (0.75, 0.5)
    assert agent["violations"] == [{"slo": "first_try_rate", "threshold": 0.9, "actual": 0.5}]
    assert agent["latency_s"]["count"] == 3 and agent["latency_s"]["p95"] < 60

    steps = agent["steps"]
    # plan in each run; search: once in three runs, twice in the retried one.
    assert (steps["count"], steps["untimed"]) == (9, 0)
    assert steps["model"]["count"] == 4 and steps["model"]["p50"] >= 0.1
    assert steps["tool"]["count"] == 5 and steps["tool"]["p50"] >= 0.05
    assert steps["queue"]["count"] == 9 and steps["queue"]["p99"] > 0
    assert steps["run"]["p50"] >= 0.05
    assert steps["other"]["p50"] < steps["run"]["p50"]

    tokens = agent["cost"]["tokens"]
    assert (tokens["spent"], tokens["budgeted_runs"], tokens["budget"]) == (400, 4, 4000)
    assert tokens["budget_used"]["p50"] == 0.1 and tokens["over_budget_runs"] == 0

    recovery = agent["recovery"]
    assert (recovery["executions"], recovery["retried"], recovery["recovered"]) == (8, 1, 0)
    # From its first dispatch to its success: two tool calls and the 0.2 s backoff between.
    assert recovery["time_s"]["count"] == 1 and recovery["time_s"]["p50"] >= 0.3

    # Met: exit 0, so that a CronJob succeeds.
    code, only = sla(cluster, "--workflow", "sla_agent", CAIRN_SLO_SUCCESS_RATE="0.7")
    assert (code, only["violations"], only["workflows"][0]["runs"]) == (0, 0, 4)
