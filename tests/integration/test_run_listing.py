"""Listing a namespace's runs on real PostgreSQL: keyset pages with filters, several
statuses merged, counts capped per status — and each filter read through an index in the
page's own order (EXPLAIN: no sort, no scan of the table)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text

from cairn.model.selection import RunFilter
from cairn.model.statuses import RunStatus
from cairn.store.backends import store_for
from cairn.store.database import make_engine
from cairn.store.listing import listing_where, page_query
from cairn.store.records import to_epoch
from cairn.store.schema import runs
from cairn.store.sql import Store
from tests.support.services import admin, db_url, drop

STATUSES = ("running", "waiting", "succeeded", "failed")
WORKFLOWS = ("alpha", "beta", "gamma", "delta")
RUNS = 4000
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SEED = """
INSERT INTO runs (id, namespace, workflow, version, status, input, current, last_seq,
                  snapshot_seq, created_at, updated_at, priority, workflow_namespace)
SELECT 'run-' || lpad(n::text, 7, '0'), CASE WHEN n % 10 = 0 THEN 'other' ELSE 'main' END,
       (CAST(:workflows AS text[]))[1 + (n / 7) % 4], 1,
       (CAST(:statuses AS text[]))[1 + n % 4], '{}', '[]', 0, 0,
       CAST(:epoch AS timestamptz) + n * interval '1 second' - (n % 3) * interval '1 second',
       CAST(:epoch AS timestamptz) + n * interval '1 second', 0, 'main'
FROM generate_series(1, :runs) AS n
"""


@pytest.fixture(scope="module")
def engine(pg_template: str) -> Iterator[Engine]:
    name = f"cairn_t_{uuid.uuid4().hex[:12]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    engine = make_engine(db_url(name))
    with engine.begin() as connection:
        connection.execute(
            text(SEED),
            {
                "workflows": list(WORKFLOWS),
                "statuses": list(STATUSES),
                "epoch": EPOCH,
                "runs": RUNS,
            },
        )
        connection.execute(text("ANALYZE runs"))
    yield engine
    engine.dispose()
    drop(name)


@pytest.fixture(scope="module")
def store(engine: Engine) -> Store:
    return store_for(engine)


def everything(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT id, workflow, status, created_at FROM runs WHERE namespace = 'main'")
        )
        found = [dict(row._mapping) for row in rows]
    return sorted(found, key=lambda run: (run["created_at"], run["id"]), reverse=True)


def pages(store: Store, selection: RunFilter, limit: int) -> list[str]:
    """Every run the filter selects, a keyset page at a time."""
    seen: list[str] = []
    before = None
    while True:
        with store.reading() as tx:
            page = tx.runs_page("main", selection, limit=limit, before=before)
        seen += [run.id for run in page]
        if len(page) < limit:
            return seen
        before = (page[-1].created_at, page[-1].id)


@pytest.mark.parametrize(
    "selection",
    [
        RunFilter(),
        RunFilter(statuses=(RunStatus.FAILED,)),
        RunFilter(statuses=(RunStatus.RUNNING, RunStatus.WAITING)),
        RunFilter(workflow="beta"),
        RunFilter(workflow="beta", statuses=(RunStatus.SUCCEEDED, RunStatus.FAILED)),
        RunFilter(
            statuses=(RunStatus.WAITING, RunStatus.FAILED),
            created_after=to_epoch(EPOCH + timedelta(seconds=500)),
            created_before=to_epoch(EPOCH + timedelta(seconds=2500)),
        ),
    ],
    ids=["all", "status", "statuses", "workflow", "workflow+statuses", "statuses+time"],
)
def test_keyset_pages_list_exactly_what_the_filter_selects_newest_first(
    store: Store, engine: Engine, selection: RunFilter
) -> None:
    def selected(run: dict[str, Any]) -> bool:
        at = to_epoch(run["created_at"])
        return (
            (not selection.statuses or run["status"] in selection.statuses)
            and (selection.workflow is None or run["workflow"] == selection.workflow)
            and (selection.created_after is None or at > selection.created_after)
            and (selection.created_before is None or at < selection.created_before)
        )

    expected = [run["id"] for run in everything(engine) if selected(run)]
    assert expected
    assert pages(store, selection, limit=37) == expected


def test_counts_are_exact_up_to_the_cap_then_say_more(store: Store, engine: Engine) -> None:
    exact: dict[str, int] = {}
    for run in everything(engine):
        if run["workflow"] == "gamma":
            exact[run["status"]] = exact.get(run["status"], 0) + 1
    with store.reading() as tx:
        counted = tx.run_counts("main", RunFilter(workflow="gamma"), cap=10_000)
        capped = tx.run_counts("main", RunFilter(workflow="gamma"), cap=50)
        two = tx.run_counts(
            "main", RunFilter(statuses=(RunStatus.FAILED, RunStatus.WAITING)), cap=10_000
        )
        elsewhere = tx.run_counts("nobody", None, cap=10)
    assert {status.value: n for status, n in counted.items() if n} == exact
    assert set(counted) == set(RunStatus)  # every status, those with none too
    assert all(n == 51 for status, n in capped.items() if exact.get(status.value, 0) > 50)
    assert set(two) == {RunStatus.FAILED, RunStatus.WAITING}
    assert set(elsewhere.values()) == {0}


def plan(engine: Engine, query: Any) -> str:
    """The plan PostgreSQL makes for the query the store would send."""
    with engine.connect() as connection:
        compiled = query.compile(
            dialect=engine.dialect, compile_kwargs={"render_postcompile": True}
        )
        found = connection.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled}", compiled.params)
        return json.dumps(found.scalar_one())


DEEP = (EPOCH + timedelta(seconds=3600), "run-0003600")


@pytest.mark.parametrize(
    ("selection", "before", "index"),
    [
        (RunFilter(), None, "ix_runs_namespace_created_at_id"),
        (RunFilter(), DEEP, "ix_runs_namespace_created_at_id"),
        (RunFilter(statuses=(RunStatus.FAILED,)), None, "ix_runs_listing_status"),
        (RunFilter(statuses=(RunStatus.FAILED,)), DEEP, "ix_runs_listing_status"),
        (RunFilter(workflow="beta"), DEEP, "ix_runs_listing_workflow"),
        (
            RunFilter(workflow="beta", statuses=(RunStatus.FAILED,)),
            DEEP,
            "ix_runs_listing_workflow_status",
        ),
        (
            RunFilter(
                statuses=(RunStatus.FAILED,),
                created_after=to_epoch(EPOCH),
                created_before=to_epoch(EPOCH + timedelta(hours=1)),
            ),
            None,
            "ix_runs_listing_status",
        ),
    ],
    ids=["all", "all-deep", "status", "status-deep", "workflow", "workflow+status", "time"],
)
def test_every_filter_pages_through_its_index_from_the_cursor_on(
    engine: Engine, selection: RunFilter, before: tuple[datetime, str] | None, index: str
) -> None:
    """No sort, no scan of the table, and the cursor an index condition: a page reads
    its own rows however deep it is."""
    found = plan(engine, page_query("main", selection, 51, before))
    assert '"Seq Scan"' not in found and '"Sort"' not in found, found
    assert index in found, found
    if before is not None:
        assert re.search(r'"Index Cond": "[^"]*ROW\(created_at', found), found


def test_a_capped_count_reads_one_index_only(engine: Engine) -> None:
    one = RunFilter(workflow="beta", statuses=(RunStatus.FAILED,))
    capped = select(runs.c.id).where(*listing_where("main", one)).limit(10_001).subquery()
    found = plan(engine, select(func.count()).select_from(capped))
    assert '"Seq Scan"' not in found and "ix_runs_listing_workflow_status" in found, found
