"""The SLA report on the wall clock: ``ctx.timed`` blocks, which measure real time — added
up, nested, raising, in threads — and the whole path on the embedded default (SQLite,
worker threads, `cairn sla`). The report from constructed facts:
tests/unit/test_sla.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cairn.cli import sla as sla_cli  # noqa: F401 - registers the command
from cairn.cli.main import app
from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from tests.unit.test_sla import context

WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")


# -- ctx.timed -------------------------------------------------------------------------------


def test_repeated_blocks_of_a_kind_add_up_and_a_name_is_kept_beside_its_kind() -> None:
    ctx = context()
    for _ in range(2):
        with ctx.timed("model"):
            time.sleep(0.02)
    with ctx.timed("tool", name="search"):
        time.sleep(0.01)
    assert 0.04 <= ctx.timings["model"] < 0.2
    assert ctx.timings["tool"] == ctx.timings["tool:search"] >= 0.01


def test_a_nested_block_counts_for_the_inner_kind_only() -> None:
    ctx = context()
    with ctx.timed("tool"):
        time.sleep(0.02)
        with ctx.timed("model"):
            time.sleep(0.05)
        with ctx.timed("tool"):  # the same kind nested: counted once, not twice
            time.sleep(0.01)
    assert 0.05 <= ctx.timings["model"] < 0.1
    assert 0.03 <= ctx.timings["tool"] < 0.05


def test_a_block_that_raises_is_still_counted() -> None:
    ctx = context()

    def call_the_tool() -> None:
        with ctx.timed("tool"):
            time.sleep(0.01)
            raise TimeoutError("the tool timed out")

    with pytest.raises(TimeoutError):
        call_the_tool()
    assert ctx.timings["tool"] >= 0.01


def test_blocks_in_threads_each_count_in_full() -> None:
    ctx = context()

    def call() -> None:
        with ctx.timed("tool"):
            time.sleep(0.05)

    with ctx.timed("model"):  # this thread's block: the pool's blocks are not nested in it
        threads = [threading.Thread(target=call) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert ctx.timings["tool"] >= 0.15
    assert ctx.timings["model"] >= 0.05


# -- end to end on the embedded default ----------------------------------------------------


def test_cairn_sla_on_sqlite_reports_timed_steps_and_exits_1_on_a_violation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        home=tmp_path,
        workflows=[WORKFLOWS],
        recovery_after=0.5,
        lease_ttl=0.6,
        heartbeat_interval=0.2,
        scheduler_interval=0.05,
    )
    runtime = Runtime.build(settings)
    runtime.start_workers()
    runtime.start_scheduler()
    try:
        run_ids = [
            runtime.orchestrator.submit("sla_agent", run_input)
            for run_input in ({}, {"succeed_on": 2})
        ]
        deadline = time.monotonic() + 20
        while not all(runtime.orchestrator.get_run(r).status.terminal for r in run_ids):
            assert time.monotonic() < deadline, "the runs did not finish"
            time.sleep(0.02)
        assert {runtime.orchestrator.get_run(r).status for r in run_ids} == {RunStatus.SUCCEEDED}
        results = [
            e["data"]
            for e in runtime.orchestrator.events(run_ids[1])
            if e["type"] in ("node_succeeded", "node_failed")
        ]
    finally:
        runtime.close()
    assert [(e["type"], e["attempt"]) for e in results] == [
        ("node_succeeded", 1),
        ("node_failed", 1),
        ("node_succeeded", 2),
    ]
    for event in results:
        assert {"queue", "run"} <= set(event["timings"])
    assert results[0]["timings"]["model"] >= 0.05
    assert results[1]["timings"]["tool:search"] >= 0.03

    monkeypatch.setenv("CAIRN_HOME", str(tmp_path))
    monkeypatch.setenv("CAIRN_SLO_FIRST_TRY_RATE", "0.9")
    outcome = CliRunner().invoke(app, ["sla", "--since", "1h", "--json"])
    assert outcome.exit_code == 1, outcome.output
    data = json.loads(outcome.stdout)
    (agent,) = data["workflows"]
    assert (agent["runs"], agent["success_rate"], agent["first_try_rate"]) == (2, 1.0, 0.5)
    assert agent["steps"]["model"]["p50"] >= 0.05 and agent["steps"]["tool"]["count"] == 3
    assert agent["cost"]["tokens"]["spent"] == 200
    assert agent["violations"][0]["slo"] == "first_try_rate"
    monkeypatch.delenv("CAIRN_SLO_FIRST_TRY_RATE")
    table = CliRunner().invoke(app, ["sla", "--since", "1h", "--workflow", "sla_agent"])
    assert table.exit_code == 0, table.output
    assert "sla_agent" in table.stdout and "no SLOs set" in table.stdout
