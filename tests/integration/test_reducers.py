"""State keys that accumulate, on real services: a 1,000-visit loop on a worker process
against PostgreSQL and Redis, each visit appending a 200-byte note. The run ends with
every note in order; each stored event holds the step's one note, never the list so far;
and the state at an early and a late seq, and the diff between them, are folded from
those deltas exactly."""

from __future__ import annotations

import psycopg

from cairn.model.statuses import RunStatus
from tests.integration.reducer_handlers import note_text
from tests.support.cluster import Cluster

VISITS = 1000


def test_a_thousand_visit_loop_stores_each_steps_delta_and_travels_back_exactly(
    cluster: Cluster,
) -> None:
    cluster.consuming(cluster.worker(concurrency=1))
    cluster.scheduler()
    run_id = cluster.submit("noting_loop", {"visits": VISITS})
    view = cluster.wait(run_id, timeout_s=300)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None
    assert view.state.vars["notes"] == [note_text(v) for v in range(1, VISITS + 1)]
    assert view.state.vars["tally"] == VISITS

    with psycopg.connect(str(cluster.settings.database_url)) as conn:
        # Less its time and timings: clock readings, whose printed length varies.
        succeeded = conn.execute(
            "SELECT seq, octet_length((data - 'at' - 'timings')::text) FROM events "
            "WHERE run_id = %s AND type = 'node_succeeded' ORDER BY seq",
            (run_id,),
        ).fetchall()
        logged = conn.execute(
            "SELECT sum(octet_length(data::text)) FROM events WHERE run_id = %s", (run_id,)
        ).fetchone()
    assert len(succeeded) == VISITS
    sizes = [size for _seq, size in succeeded]
    # Its one note and the event's own fields: the 1,000th no larger than the 1st but for
    # the digits of its iteration and visit count (1 -> 1000: three more each).
    assert max(sizes) < 600, max(sizes)
    assert sizes[-1] <= sizes[0] + 6, (sizes[0], sizes[-1])
    assert logged is not None and logged[0] < VISITS * 700  # the log grows by the deltas

    timeline = cluster.client.timeline(run_id)
    seq_of = {visit: seq for visit, (seq, _size) in enumerate(succeeded, start=1)}
    early, late = timeline.state_at(seq_of[7]), timeline.state_at(seq_of[993])
    assert early.vars["notes"] == [note_text(v) for v in range(1, 8)]
    assert early.vars["tally"] == 7
    assert late.vars["notes"] == [note_text(v) for v in range(1, 994)]
    assert late.vars["tally"] == 993
    changes = {c.path: c for c in timeline.diff(seq_of[990], seq_of[993])}
    added = {path: c.new for path, c in changes.items() if path.startswith("vars.notes[")}
    assert added == {f"vars.notes[{v - 1}]": note_text(v) for v in (991, 992, 993)}
    assert (changes["vars.tally"].old, changes["vars.tally"].new) == (990, 993)
