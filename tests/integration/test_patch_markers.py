"""Patch markers on PostgreSQL with real Celery workers (docs/versions.md#patch-markers).

A run of ``patched_pricing`` is priced by a worker running the code from before the fix
(``tests.integration.patch_handlers`` without ``PRICING_FIX``: it never asks
``ctx.patched``) and waits for a person. That worker is replaced by one with the fix.
Asked to price again, the old run's node has run before: it is told False and keeps the
old rounding (2.5 -> 2). A run started now is told True and rounds half up (3), on every
visit. ``answers_in_flight`` counts one run each way; ``cairn state`` prints each run's
answer; live forks keep their parent's path (one forked from before the old run asked
reaches the same answer by the rule); ``cairn replay`` of every run on the new code finds
every step ``same``.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner, Result

from cairn.cli import replay as replay_cli  # noqa: F401 - registers cairn replay
from cairn.cli import timeline as timeline_cli  # noqa: F401 - registers cairn state
from cairn.cli import versions as versions_cli  # noqa: F401 - registers cairn versions
from cairn.cli.main import app
from cairn.engine.patches import answers_in_flight
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.timetravel.fork import fork_live, fork_point
from tests.integration import patch_handlers
from tests.support.cluster import Cluster

WORKFLOW = "patched_pricing"
PATCH = patch_handlers.PATCH


def command(cluster: Cluster, *args: str) -> Result:
    """A command in this process: a replay runs the handlers of this process's code."""
    cairn_env = {k: v for k, v in cluster.env.items() if k.startswith("CAIRN_")}
    return CliRunner().invoke(app, list(args), env=cairn_env)


def state_of(cluster: Cluster, run_id: str) -> RunState:
    state = cluster.client.get_run(run_id).state
    assert state is not None
    return state


def priced(cluster: Cluster, run_id: str, times: int) -> RunState:
    """Waits until the run has been priced ``times`` times and waits for a person."""

    def done() -> bool:
        state = state_of(cluster, run_id)
        return state.status is RunStatus.WAITING and len(state.vars.get("paths", [])) == times

    cluster.wait_for(done, 30, f"{run_id} priced {times} time(s)")
    return state_of(cluster, run_id)


def first_price_seq(cluster: Cluster, run_id: str) -> int:
    (seq,) = [
        e["seq"]
        for e in cluster.client.events(run_id)
        if e["type"] == "node_succeeded" and e["data"]["node"] == "price"
    ]
    return int(seq)


def test_old_and_new_runs_take_their_own_paths_and_replay_the_same(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = cluster.client
    orchestrator = client.runtime.orchestrator
    cluster.scheduler()
    before_fix = cluster.worker(concurrency=1)
    cluster.consuming(before_fix)
    old = cluster.submit(WORKFLOW, {"amount": 2.5})
    priced(cluster, old, 1)
    early = first_price_seq(cluster, old)  # priced, and nothing asked yet

    # The fix is deployed: the worker without it goes, one with it comes.
    cluster.kill(before_fix)
    cluster.consuming(cluster.worker(concurrency=1, **{patch_handlers.FIX: "1"}))
    new = cluster.submit(WORKFLOW, {"amount": 2.5})
    priced(cluster, new, 1)
    for run_id in (old, new):
        client.signal(run_id, "again")
    assert priced(cluster, old, 2).vars["paths"] == ["old", "old"]
    assert priced(cluster, new, 2).vars["paths"] == ["new", "new"]
    (counted,) = answers_in_flight(orchestrator, WORKFLOW)
    assert (counted.patch, counted.answered_true, counted.answered_false) == (PATCH, 1, 1)
    assert counted.needs_old_path and counted.old_path_runs == (old,)
    shown = command(cluster, "state", old)
    assert shown.exit_code == 0 and f"patches: {PATCH}=false" in shown.output, shown.output
    assert f"patches: {PATCH}=true" in command(cluster, "state", new).output
    listed = command(cluster, "versions", WORKFLOW)  # what an operator reads before deleting
    assert listed.exit_code == 0, listed.output
    assert (
        f"patch {PATCH}: 1 took the new path, 1 the old, 0 not asked yet — a run in flight "
        "may still need the old path"
    ) in " ".join(listed.output.split()), listed.output

    # Live forks: from each run's latest state, and from the old run before it asked.
    forks = {
        fork_live(orchestrator, fork_point(orchestrator, run_id, seq), confirm=True): paths
        for run_id, seq, paths in (
            (old, client.get_run(old).last_seq, ["old", "old", "old"]),
            (new, client.get_run(new).last_seq, ["new", "new", "new"]),
            (old, early, ["old", "old"]),  # its price ran before: False, by the rule
        )
    }
    for fork, paths in forks.items():
        priced(cluster, fork, len(paths) - 1)
        client.signal(fork, "again")
        forked = priced(cluster, fork, len(paths))
        assert forked.vars["paths"] == paths
        assert forked.patches == {PATCH: paths[-1] == "new"}

    everyone = [old, new, *forks]
    for run_id in everyone:
        client.signal(run_id, "approve")
    cluster.all_succeeded(everyone, 30)
    assert state_of(cluster, old).vars["total"] == 2
    assert state_of(cluster, new).vars["total"] == 3
    assert answers_in_flight(orchestrator, WORKFLOW) == []
    (drained,) = json.loads(command(cluster, "versions", WORKFLOW, "--json").stdout)["workflows"]
    assert drained["in_flight"] == 0 and drained["versions"][0]["drained"]

    # Replayed on the code with the fix (this process's), every step is the same.
    monkeypatch.setenv(patch_handlers.FIX, "1")
    for run_id in everyone:
        replayed = command(cluster, "replay", run_id, "--json")
        assert replayed.exit_code == 0, replayed.output
        counts = json.loads(replayed.stdout)["counts"]
        assert counts["diverged"] == counts["refused"] == 0 and counts["same"] >= 1, counts


def test_answers_of_runs_whose_state_is_not_cached_are_restored(cluster: Cluster) -> None:
    # The worker caches no state on the rows it writes: the run's row holds none after
    # its step, and its answers are read from its restored state.
    no_cache = {"CAIRN_STATE_CACHE_BYTES": "0", patch_handlers.FIX: "1"}
    cluster.consuming(cluster.worker(concurrency=1, **no_cache))
    run_id = cluster.submit(WORKFLOW, {"amount": 2.5})
    assert priced(cluster, run_id, 1).patches == {PATCH: True}
    orchestrator = cluster.client.runtime.orchestrator
    with orchestrator.store.reading() as tx:
        (listed,) = tx.patch_answers("default", WORKFLOW)
    assert (listed.id, listed.patches) == (run_id, None)
    (counted,) = answers_in_flight(orchestrator, WORKFLOW)
    assert (counted.answered_true, counted.answered_false, counted.needs_old_path) == (1, 0, False)
