"""The run timeline on PostgreSQL with real workers: what ``cairn history`` and
``cairn state --at`` say equals what the live run wrote and its handlers were given,
through a transient failure and a worker killed mid-step; ``cairn diff`` and ``cairn
bisect`` (as the command a person runs) on the same runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner, Result

from cairn.cli import timeline as timeline_cli  # noqa: F401 - registers the commands
from cairn.cli.main import app
from cairn.config import Settings
from cairn.model.statuses import RunStatus
from cairn.timetravel.bisection import Verdict
from cairn.timetravel.diff import plain
from tests.integration import timeline_handlers
from tests.support.cluster import Cluster

SETTINGS = {
    # A snapshot every three events: restores start from snapshots.
    "CAIRN_SNAPSHOT_EVERY_EVENTS": "3",
    "CAIRN_SNAPSHOT_KEEP": "1",
    # No relay within a test: its copy of a killed worker's message would wait in the
    # queue for the next worker, which takes the lapsed lease over — no recovery then.
    "CAIRN_OUTBOX_RELAY_AFTER": "120",
}
CHECK = "tests.integration.timeline_handlers:balance_ok"

# Every state a run's row is given (the cache each step hands on to the next), by seq.
LIVE_STATES = """
CREATE TABLE live_states (run_id text, seq integer, state jsonb);
CREATE FUNCTION note_live_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS NOT NULL THEN
        INSERT INTO live_states VALUES (NEW.id, NEW.last_seq, NEW.state);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER note_live_state AFTER INSERT OR UPDATE ON runs
    FOR EACH ROW EXECUTE FUNCTION note_live_state();
"""


@pytest.fixture
def deployment(cluster: Cluster) -> Cluster:
    """The cluster with SETTINGS, and the live states noted by a trigger: nothing in
    cairn is asked or changed."""
    cluster.env.update(SETTINGS)
    cluster.settings = Settings.from_env(
        {k: v for k, v in cluster.env.items() if k.startswith("CAIRN_")}
    )
    with psycopg.connect(str(cluster.settings.database_url), autocommit=True) as conn:
        conn.execute(LIVE_STATES)
    return cluster


def live_states(cluster: Cluster, run_id: str) -> dict[int, dict[str, Any]]:
    states: dict[int, dict[str, Any]] = {}
    with psycopg.connect(str(cluster.settings.database_url)) as conn:
        for seq, state in conn.execute(
            "SELECT seq, state FROM live_states WHERE run_id = %s", (run_id,)
        ):
            assert states.setdefault(seq, state) == state, f"two states written for seq {seq}"
    return states


def observed(path: Path, run_id: str) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [entry for entry in map(json.loads, lines) if entry["run_id"] == run_id]


def command(cluster: Cluster, *args: str) -> Result:
    """A command in this process (a process of its own costs seconds of imports)."""
    cairn_env = {k: v for k, v in cluster.env.items() if k.startswith("CAIRN_")}
    return CliRunner().invoke(app, list(args), env=cairn_env)


def cairn(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a person runs it: a process of its own."""
    return cluster.cli(*args)


def test_timeline_equals_the_live_run_through_a_retry_and_a_killed_worker(
    deployment: Cluster, tmp_path: Path
) -> None:
    cluster = deployment
    seen = tmp_path / "observed.jsonl"
    cluster.scheduler()
    first = cluster.worker(concurrency=1)
    cluster.consuming(first)
    run_id = cluster.submit("timeline_order", {"observed": str(seen), "slow_s": 30})
    cluster.wait_for(
        lambda: any(e["node"] == "price" for e in observed(seen, run_id)),
        what="the slow step to start",
    )
    cluster.kill(first)  # mid-step: recovery dispatches it again once its lease lapses
    # The next worker starts once the scheduler has recovered the step (else it might find
    # a copy of the message and take the lapsed lease over, which is no recovery event).
    cluster.wait_for(
        lambda: any(e["type"] == "audit.recovered" for e in cluster.client.events(run_id)),
        what="the scheduler to recover the killed step",
    )
    cluster.consuming(cluster.worker(concurrency=1))
    assert cluster.wait(run_id, 30).status is RunStatus.SUCCEEDED

    timeline = cluster.client.timeline(run_id)
    found = timeline.history()
    assert [(s.label, s.status) for s in found.steps] == [
        ("prepare#1/1", "succeeded"),
        ("fetch#1/1", "failed"),
        ("fetch#1/2", "succeeded"),
        ("price#1/1", "succeeded"),
        ("finish#1/1", "succeeded"),
    ]
    prepare, failed, retried, priced, finished = found.steps
    assert "retrying" in failed.marks and failed.error == "transient: TransientError: upstream 503"
    assert "retry" in retried.marks and retried.duration_from == "worker"
    assert "recovered" in priced.marks
    assert any(note.startswith("recovered (") for note in priced.notes), priced.notes
    assert not (set(prepare.marks) | set(finished.marks))
    recoveries = [e for e in found.events if e.type == "audit.recovered"]
    assert recoveries and all("price#1/1" in e.summary for e in recoveries)
    assert {e.type for e in found.events} == {"run_started", "timer_fired", "audit.recovered"}

    # (a) What each handler was given — the killed one included — is the inputs digest.
    given = observed(seen, run_id)
    assert [e["node"] for e in given].count("price") == 2
    by_execution = {s.execution[:3]: s.inputs_digest for s in found.steps}
    for entry in given:
        assert (
            by_execution[(entry["node"], entry["iteration"], entry["attempt"])]
            == (entry["inputs_digest"])
        ), entry

    # (a) The state at every seq, audit entries included, is the state the live run wrote.
    live = live_states(cluster, run_id)
    assert sorted(live) == list(range(1, found.last_seq + 1))
    with cluster.client.runtime.store.reading() as tx:
        assert len(tx.snapshot_seqs(run_id)) > 1
    for seq in range(1, found.last_seq + 1):
        assert plain(timeline.state_at(seq)) == live[seq], seq

    # (d) What fetch's successful attempt changed.
    changes = {c.path: c for c in timeline.diff(retried.seq - 1, retried.seq)}
    assert changes["vars.order.items[2]"].new == "pot"
    assert changes["vars.unit"].kind == "added"
    assert changes["nodes.fetch.status"].new == "succeeded"
    shown = command(cluster, "diff", run_id, "--from", "1", "--to", str(found.last_seq), "--json")
    assert shown.exit_code == 0, shown.output
    assert {"path": "vars.receipt", "change": "added", "new": "r-42"} in json.loads(shown.stdout)

    printed = command(cluster, "history", run_id)
    assert printed.exit_code == 0, printed.output
    assert "recovered" in printed.stdout and "retrying" in printed.stdout


def test_bisect_finds_the_seeded_bad_step_of_a_64_step_run_in_at_most_7_checks(
    deployment: Cluster,
) -> None:
    cluster = deployment
    cluster.worker(concurrency=1)
    run_id = cluster.submit("timeline_loop", {"balance": 100, "bad_at": 45})
    assert cluster.wait(run_id, 30).status is RunStatus.SUCCEEDED
    timeline = cluster.client.timeline(run_id)
    assert len(timeline.steps()) == 64

    found = timeline.bisect(timeline_handlers.balance_ok)
    assert found.verdict is Verdict.FOUND and len(found.checks) <= 7
    assert found.step is not None and found.step.label == "tick#45/1"
    assert found.input_state is not None and found.input_state.vars["balance"] == 100 + 44 * 10
    assert found.output == {"count": 45, "balance": 100 + 45 * 10 - 1000}

    ran = cairn(cluster, "bisect", run_id, "--check", CHECK, "--json")
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["step"]["node"] == "tick" and report["step"]["iteration"] == 45
    assert len(report["checks"]) <= 7
    never = command(
        cluster, "bisect", run_id, "--check", "tests.integration.timeline_handlers:always"
    )
    assert never.exit_code == 1 and "holds after every step" in never.stdout
