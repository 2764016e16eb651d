"""Processes that fail well: only workers need the handlers' code; a schedule that cannot
tick says so once and shows it; a process on a database never migrated says what to run
and stops, instead of a traceback a pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from cairn.model.schedules import ScheduleSpec
from cairn.model.statuses import RunStatus
from tests.support.cluster import ROOT, Cluster
from tests.support.services import admin, db_url, drop

EVERY_SECOND = "* * * * * *"


def _code_elsewhere(tmp_path: Path, workflow: str) -> tuple[Path, Path]:
    """A module of handlers in a folder of its own, and a definition that uses it."""
    code = tmp_path / "code"
    code.mkdir()
    module = f"handlers_{uuid.uuid4().hex[:10]}"
    (code / f"{module}.py").write_text("def step(ctx, state):\n    return {'stepped': True}\n")
    definition = tmp_path / f"{workflow}.yaml"
    definition.write_text(
        f"name: {workflow}\nversion: 1\nstart: step\nnodes:\n"
        f"  step: {{handler: '{module}:step', next: done}}\n"
        "  done: {end: succeeded}\n"
    )
    return code, definition


def test_only_workers_need_the_handlers_code(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, definition = _code_elsewhere(tmp_path, "elsewhere")
    with monkeypatch.context() as registering:  # registering checks the code: it is here
        registering.syspath_prepend(str(code))
        cluster.client.register(definition)
    scheduler = cluster.scheduler()  # neither it nor the CLI below can import the module
    cluster.worker(PYTHONPATH=f"{ROOT}{os.pathsep}{code}")
    cluster.client.schedules.add(
        "default", ScheduleSpec(name="tick", cron=EVERY_SECOND, workflow="elsewhere")
    )
    submitted = cluster.cli("submit", "elsewhere", "--input", "{}")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1]
    assert cluster.client.wait(run_id, 60).status is RunStatus.SUCCEEDED

    def ticked_and_ran() -> bool:
        runs = cluster.client.schedules.runs("default", "tick")
        return any(cluster.client.get_run(r.id).status is RunStatus.SUCCEEDED for r in runs)

    cluster.wait_for(ticked_and_ran, 60, "a tick's run to succeed")
    log = scheduler.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    assert "cannot be imported" not in log and "Traceback" not in log, log


def test_a_schedule_that_cannot_tick_says_so_once_and_shows_why(
    cluster: Cluster, tmp_path: Path
) -> None:
    definition = tmp_path / "fragile.yaml"
    definition.write_text(
        "name: fragile\nversion: 1\nstart: done\nnodes:\n  done: {end: succeeded}\n"
    )
    cluster.client.register(definition)
    cluster.client.schedules.add(
        "default", ScheduleSpec(name="fragile", cron=EVERY_SECOND, workflow="fragile")
    )
    # The stored definition no longer reads (written by hand, or by a cairn that reads
    # what this one does not): every tick meets the same fault.
    broken = {"name": "fragile", "version": 1, "start": "nowhere", "nodes": {}}
    engine = create_engine(cluster.settings.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE workflows SET spec = :spec WHERE name = 'fragile'"),
                {"spec": json.dumps(broken)},
            )
    finally:
        engine.dispose()
    scheduler = cluster.scheduler()

    def shown() -> str:
        return cluster.cli("schedule", "show", "fragile").stdout

    cluster.wait_for(lambda: "nowhere" in shown(), 60, "the schedule to show its error")
    cluster.wait_for(  # a few seconds of ticks due, each failing
        lambda: "cannot tick" in scheduler.log_path.read_text(),  # type: ignore[attr-defined]
        30,
        "the scheduler to say the schedule cannot tick",
    )
    time.sleep(4)  # ticks due every second go on failing meanwhile
    log = scheduler.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    said = [line for line in log.splitlines() if "schedule default/fragile cannot tick" in line]
    assert len(said) == 1, log  # once a minute at most, and no traceback for a fault
    assert "Traceback" not in log, log
    assert "error" in shown()


def test_a_process_on_a_database_never_migrated_says_what_to_run(cluster: Cluster) -> None:
    name = f"cairn_t_empty_{uuid.uuid4().hex[:10]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        for command in (["scheduler"], ["worker"], ["status", "some-run"]):
            ended = subprocess.run(
                [sys.executable, "-m", "cairn.cli", *command],
                cwd=ROOT,
                env={**cluster.env, "CAIRN_DATABASE_URL": db_url(name)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            said = ended.stdout + ended.stderr
            assert ended.returncode == 2, said
            assert "cairn db upgrade" in said and "Traceback" not in said, said
    finally:
        drop(name)


def test_a_worker_without_the_handlers_code_says_so_once_and_the_run_waits(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, definition = _code_elsewhere(tmp_path, "codeless")
    with monkeypatch.context() as registering:
        registering.syspath_prepend(str(code))
        cluster.client.register(definition)
    cluster.scheduler()  # recovery dispatches the waiting node again
    lacking = cluster.worker(concurrency=1)  # its PYTHONPATH has cairn, not the handlers
    first, second = (cluster.client.submit("codeless", {}) for _ in range(2))
    log_path = lacking.log_path  # type: ignore[attr-defined]

    def said() -> list[str]:
        lines = log_path.read_text(errors="replace").splitlines()
        return [line for line in lines if "codeless@1 cannot run on worker" in line]

    cluster.wait_for(lambda: bool(said()), 60, "the worker to say it cannot run the workflow")
    time.sleep(8)  # both runs' nodes came, and were dispatched again by recovery
    (line,) = said()  # once a minute at most, naming the handler and what to do
    assert "cannot be imported" in line and "PYTHONPATH" in line, line
    assert "Traceback" not in log_path.read_text(errors="replace")
    for run_id in (first, second):
        assert cluster.client.get_run(run_id).status is RunStatus.RUNNING  # waits, not failed
    with cluster.client.runtime.store.reading() as tx:
        (fault,) = tx.code_faults(within_s=600)
    assert (fault.workflow, fault.version, fault.count) == ("codeless", 1, 1)
    assert "cannot be imported" in fault.fault
    fleet = cluster.cli("status", "--fleet").stdout
    assert "cannot run: default/codeless@1 on worker" in fleet, fleet

    lacking.terminate()
    lacking.wait(30)
    cluster.worker(PYTHONPATH=f"{ROOT}{os.pathsep}{code}")  # the code deployed
    for run_id in (first, second):
        assert cluster.client.wait(run_id, 90).status is RunStatus.SUCCEEDED
