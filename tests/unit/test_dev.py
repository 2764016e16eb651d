"""``cairn dev``'s parts that need no process: the plan it makes from the environment,
how it renders its children's lines, and which file events count as changes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from watchfiles import Change

from cairn.dev.lines import Log, render
from cairn.dev.plan import DEV_DEFAULTS, KEY_FILE, DevPlan, dev_key, make_plan
from cairn.dev.reload import SourceFilter, Stamps
from cairn.errors import ConfigError, InvalidInput


def plan_in(tmp_path: Path, environ: dict[str, str], workflows: list[str] | None = None) -> DevPlan:
    return make_plan(
        workflows=["flow.yaml"] if workflows is None else workflows,
        host="127.0.0.1",
        port=8000,
        watch=[],
        project=tmp_path,
        environ={"PATH": "/bin", **environ},
    )


def test_the_embedded_default_keeps_its_files_in_the_project(tmp_path: Path) -> None:
    plan = plan_in(tmp_path, {})
    assert plan.settings.home == tmp_path / ".cairn"
    assert plan.settings.effective_database_url == f"sqlite:///{tmp_path}/.cairn/cairn.db"
    assert plan.roles == ("worker",)  # with the scheduler and the API: one memory of leases
    assert plan.env["CAIRN_WORKFLOWS"] == "flow.yaml"
    assert plan.env["CAIRN_LOG_FORMAT"] == "json"
    assert plan.env["PATH"] == "/bin"
    assert plan.watch == (tmp_path.resolve(),)
    assert plan.loopback


def test_a_broker_gets_a_scheduler_of_its_own(tmp_path: Path) -> None:
    plan = plan_in(tmp_path, {"CAIRN_BROKER_URL": "redis://127.0.0.1:6379/3"})
    assert plan.roles == ("worker", "scheduler", "api")


def test_nothing_to_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="--workflows"):
        plan_in(tmp_path, {}, workflows=[])
    from_env = plan_in(tmp_path, {"CAIRN_WORKFLOWS": "steps"}, workflows=[])
    assert from_env.env["CAIRN_WORKFLOWS"] == "steps"


def test_a_watched_folder_must_be_one(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="not a folder"):
        make_plan(
            workflows=["flow.yaml"],
            host="127.0.0.1",
            port=8000,
            watch=[tmp_path / "nowhere"],
            project=tmp_path,
            environ={},
        )


def test_a_wrong_setting_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="CAIRN_LEASE_TLL"):
        plan_in(tmp_path, {"CAIRN_LEASE_TLL": "5"})


def test_dev_timings_apply_only_where_the_user_set_none(tmp_path: Path) -> None:
    plan = plan_in(tmp_path, {})
    assert plan.settings.lease_ttl == float(DEV_DEFAULTS["CAIRN_LEASE_TTL"])
    # One of them set: none of the defaults, which could break renewal <= TTL/3.
    plan = plan_in(tmp_path, {"CAIRN_HEARTBEAT_INTERVAL": "10"})
    assert plan.settings.heartbeat_interval == 10
    assert plan.settings.lease_ttl == 30


def test_the_dev_key_is_kept_private_and_stays_the_same(tmp_path: Path) -> None:
    key = dev_key(tmp_path)
    assert len(key) > 30
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert dev_key(tmp_path) == key


def test_the_dev_key_joins_the_users_keys(tmp_path: Path) -> None:
    plan = plan_in(tmp_path, {"CAIRN_API_KEYS": "team:their-own-key-0123456789"})
    assert plan.env["CAIRN_API_KEYS"] == f"team:their-own-key-0123456789,default:{plan.api_key}"


def test_another_address_than_loopback_is_said_to_be_one(tmp_path: Path) -> None:
    plan = make_plan(
        workflows=["flow.yaml"],
        host="0.0.0.0",
        port=8000,
        watch=[],
        project=tmp_path,
        environ={},
    )
    assert not plan.loopback


def step_line(**fields: object) -> str:
    return json.dumps(
        {
            "time": "2026-01-02T10:11:12.000+00:00",
            "level": "INFO",
            "logger": "steps",
            "message": "saying hello",
            **fields,
        }
    )


def test_a_steps_line_names_the_run_short_and_the_node() -> None:
    run = "3f2a1b9c-0000-4000-8000-000000000000"
    line = render("worker", step_line(run_id=run, node="draft", attempt=2), json_lines=False)
    assert line is not None
    assert line.split(" ", 1)[1] == "worker    3f2a1b9c draft#2 saying hello"


def test_a_line_says_its_level_unless_info_and_carries_its_traceback() -> None:
    raw = step_line(level="ERROR", exc_info="Traceback ...\nValueError: x")
    assert render("api", raw, json_lines=False) == (
        f"{render('api', step_line(), json_lines=False)}".replace(
            "saying hello", "ERROR saying hello"
        )
        + "\n                   Traceback ...\n                   ValueError: x"
    )


def test_the_schedulers_threads_in_the_worker_are_the_schedulers() -> None:
    line = render("worker", step_line(dev_process="scheduler"), json_lines=False)
    assert line is not None and " scheduler " in line


def test_a_line_that_is_not_json_is_shown_as_it_is() -> None:
    line = render("worker", "printed by a handler", json_lines=False)
    assert line is not None and line.endswith("worker    printed by a handler")


def test_uvicorns_start_lines_are_left_out() -> None:
    assert render("api", step_line(logger="uvicorn.error"), json_lines=False) is None
    assert render("api", step_line(logger="uvicorn.error", level="ERROR"), json_lines=False)


def test_a_json_log_stays_json_naming_the_process() -> None:
    entry = json.loads(render("worker", step_line(dev_process="scheduler"), json_lines=True) or "")
    assert entry["process"] == "scheduler" and entry["message"] == "saying hello"
    assert "dev_process" not in entry
    assert json.loads(render("api", "plain", json_lines=True) or "")["process"] == "api"
    stream = io.StringIO()
    Log(stream, json_lines=True).say("ready")
    assert json.loads(stream.getvalue())["process"] == "dev"


def test_reading_a_file_is_no_change_writing_it_is(tmp_path: Path) -> None:
    handler = tmp_path / "steps.py"
    handler.write_text("x = 1\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("-")
    home = tmp_path / ".cairn"
    home.mkdir()
    accept = SourceFilter([home])
    stamps = Stamps([tmp_path], accept)
    handler.read_text()
    assert stamps.changed([handler]) == []
    handler.write_text("x = 22\n")
    assert stamps.changed([handler]) == [handler]
    assert stamps.changed([handler]) == []
    os.utime(handler, ns=(0, 1))
    assert stamps.changed([handler]) == [handler]
    assert not accept(Change.modified, str(notes))
    assert not accept(Change.modified, str(home / "x.py"))
    assert accept(Change.added, str(tmp_path / "flow.yaml"))
