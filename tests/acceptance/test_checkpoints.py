"""Checkpoints inside a node, on real services: a 40-turn async agent loop whose worker
is killed with SIGKILL at turn 25 resumes on another worker at its last checkpoint, with
the same messages; the model is not asked for any turn before the checkpoint again. Each
checkpoint after the first stores only what changed: its rows stay small as the history
grows, and the resumed execution folds them back into the whole history."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster
from tests.support.model import ModelStandIn, model_stand_in


@pytest.fixture
def model() -> Iterator[ModelStandIn]:
    with model_stand_in(hold_at=25) as stand_in:
        yield stand_in


def test_an_agent_loop_killed_mid_node_resumes_at_its_last_checkpoint(
    cluster: Cluster, model: ModelStandIn
) -> None:
    doomed = cluster.spawn("worker", "--pool=threads", "--concurrency=4")
    cluster.consuming(doomed)
    cluster.scheduler()
    run_id = cluster.submit("agent_loop", {"model_url": model.url, "turns": 40})
    assert model.holding.wait(60), cluster.log_tails()
    with psycopg.connect(cluster.settings.database_url) as conn:
        rows = conn.execute(
            "SELECT seq, base, octet_length(context::text) FROM node_checkpoints "
            "WHERE run_id = %s ORDER BY seq",
            (run_id,),
        ).fetchall()
    assert len(rows) >= 25, rows  # a checkpoint after each of turns 0..24 (and automatic)
    changes = [size for _seq, base, size in rows if base]
    assert len(changes) == len(rows) - 1  # the first whole, every later one a change
    assert max(changes) < 400, rows  # the turns since the last one, never the history
    cluster.kill(doomed)  # kill -9 while turn 25 is out
    cluster.consuming(cluster.spawn("worker", "--pool=threads", "--concurrency=4"))
    view = cluster.wait(run_id, timeout_s=60)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None
    replies = [m["content"] for m in view.state.messages if m["role"] == "assistant"]
    assert replies == [f"reply {turn}" for turn in range(40)]  # each once, in order
    assert view.state.vars["turns_taken"] == 40 and view.state.vars["last_turn"] == 39
    asked = model.counts()
    assert all(asked[turn] == 1 for turn in range(25)), asked  # none before it again
    assert asked[25] == 2  # the one out when the worker died, and its retry
    assert all(asked[turn] == 1 for turn in range(26, 40)), asked
    executions = [
        line.split()[4]
        for line in cluster.ledger.read_text().splitlines()
        if line.startswith(run_id)
    ]
    # The checkpoint after turn 25's predecessor: 25 turns, 25 messages (no others here).
    assert executions == ["start", "resumed@25:25:25", "done"], executions
