"""``cairn runs`` and ``cairn bulk`` in direct mode, on the embedded default (SQLite under
a temporary CAIRN_HOME): filters, keyset pages, JSON; the Python client's ``runs``; a
bulk cancel counted first and declined, then confirmed; and remote mode's refusals of
what has no remote form, before anything is asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cairn.cli.main import app
from cairn.client import Client
from tests.support.cli import at_repo_root

WORKFLOW = """\
name: listed
version: 1
start: review
nodes:
  review: {wait: {signals: {approve: done}, timeout: 1h, on_timeout: done}}
  done:   {end: succeeded}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    at_repo_root(monkeypatch, home=tmp_path)
    return tmp_path


@pytest.fixture
def runs(home: Path) -> Iterator[tuple[Client, list[str]]]:
    """Five waiting runs of ``listed`` in namespace ``team``, one in ``default``, oldest
    first; the first one approved (succeeded)."""
    definition = home / "listed.yaml"
    definition.write_text(WORKFLOW)
    client = Client()
    client.register(definition)
    client.register(definition, namespace="team")
    made = [client.submit("listed", {"n": n}, namespace="team") for n in range(5)]
    client.submit("listed", {}, namespace="default")
    client.signal(made[0], "approve")
    yield client, made
    client.close()


def listed(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["runs", *args, "--json"])
    assert result.exit_code == 0, result.output
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_runs_filters_and_pages_a_namespaces_runs(runs: tuple[Client, list[str]]) -> None:
    client, made = runs
    everything = listed("--namespace", "team")
    assert [run["id"] for run in everything["runs"]] == list(reversed(made))
    assert everything["next_cursor"] is None
    first = everything["runs"][-1]
    assert (first["workflow"], first["version"], first["status"]) == ("listed", 1, "succeeded")

    waiting = listed("--namespace", "team", "--status", "waiting")
    assert [run["id"] for run in waiting["runs"]] == list(reversed(made[1:]))
    both = listed("--namespace", "team", "--status", "waiting", "--status", "succeeded")
    assert len(both["runs"]) == 5
    assert listed("--namespace", "team", "--workflow", "other")["runs"] == []
    assert listed("--namespace", "team", "--version", "2")["runs"] == []
    assert listed("--namespace", "team", "--created-before", "2000-01-01")["runs"] == []
    assert len(listed("--namespace", "team", "--created-after", "2000-01-01")["runs"]) == 5
    assert len(listed()["runs"]) == 1  # the default namespace's

    pages, cursor = [], None
    while True:
        page = listed(
            "--namespace", "team", "--limit", "2", *(["--before", cursor] if cursor else [])
        )
        pages.append([run["id"] for run in page["runs"]])
        if (cursor := page["next_cursor"]) is None:
            break
    assert pages == [list(reversed(made))[i : i + 2] for i in (0, 2, 4)]

    # The Python client lists the same runs with the same filters, paging as it goes.
    assert [r.id for r in client.runs(namespace="team", page_size=2)] == list(reversed(made))
    assert [r.id for r in client.runs(namespace="team", status="succeeded")] == [made[0]]
    assert client.runs(namespace="team").__next__().to_summary() == everything["runs"][0]


def test_runs_prints_a_table_and_refuses_bad_filters(runs: tuple[Client, list[str]]) -> None:
    _client, made = runs
    shown = CliRunner().invoke(app, ["runs", "--namespace", "team"])
    assert shown.exit_code == 0, shown.output
    assert all(run_id in shown.stdout for run_id in made)
    assert "listed@1" in shown.stdout and "waiting" in shown.stdout
    bad = CliRunner().invoke(app, ["runs", "--status", "sleeping"])
    assert bad.exit_code != 0 and "--status is one of" in str(bad.exception)
    cursor = CliRunner().invoke(app, ["runs", "--before", "not-a-cursor"])
    assert cursor.exit_code != 0


def test_bulk_cancel_counts_first_then_cancels_exactly_those(
    runs: tuple[Client, list[str]],
) -> None:
    client, made = runs
    asked = ["bulk", "cancel", "--namespace", "team", "--status", "waiting", "--reason", "gone"]
    declined = CliRunner().invoke(app, asked, input="n\n")
    assert declined.exit_code == 1, declined.output
    assert "4 run(s) selected" in declined.stdout
    assert {client.get_run(r).status.value for r in made[1:]} == {"waiting"}

    done = CliRunner().invoke(app, [*asked, "--yes"])
    assert done.exit_code == 0, done.output
    assert "done: 4 run(s); refused: 0" in done.stdout
    assert {client.get_run(r).status.value for r in made[1:]} <= {"cancelling", "cancelled"}
    assert client.get_run(made[0]).status.value == "succeeded"
    everything = CliRunner().invoke(app, ["bulk", "cancel", "--yes"])
    assert everything.exit_code != 0  # no filter: not every run


def test_remote_mode_says_what_has_no_remote_form(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_API_URL", "http://127.0.0.1:9")
    for args in (["sla"], ["artifacts-cleanup"], ["status", "--fleet"]):
        refused = CliRunner().invoke(app, args)
        assert refused.exit_code != 0, args
        assert "has no remote form" in str(refused.exception), args
    other = CliRunner().invoke(app, ["runs", "--namespace", "team"])
    assert "its API key's namespace" in str(other.exception)
