"""Schedules, debounce and singleton on real PostgreSQL, Redis, Celery workers and
scheduler subprocesses: two schedulers, one killed with SIGKILL, start each tick once;
a backfill of 24 hourly ticks starts 24 runs, and again none; each overlap policy; the
catch-up window after an outage; debounce collapses rapid submissions and respects
max_wait; singleton skip and cancel under concurrent submits."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from cairn.model.schedules import OverlapPolicy, ScheduleSpec
from cairn.model.starts import Debounce, Singleton, SingletonMode
from cairn.model.statuses import RunStatus
from cairn.store.records import to_epoch
from tests.support.cluster import Cluster

EVERY_SECOND = "* * * * * *"  # six fields: seconds first


def tick_of(request_id: str) -> float:
    """The tick a schedule's run was started for, from its request id."""
    label = request_id.split(":", 2)[2]
    return datetime.strptime(label, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def schedule_runs(cluster: Cluster, name: str) -> list[Any]:
    return cluster.client.schedules.runs("default", name, limit=1000)


def db_now(cluster: Cluster) -> float:
    with cluster.client.runtime.store.reading() as tx:
        return tx.now()


def holder(cluster: Cluster, key: str) -> str | None:
    """The run a singleton key names."""
    with cluster.client.runtime.store.transaction() as tx:
        return tx.lock_singleton("default", key)


def scheduler_up(cluster: Cluster) -> None:
    """Start a scheduler and wait until it passes (a process starts slowly on a busy
    machine; the debounce tests time what it does, not how long it takes to start)."""
    cluster.scheduler()
    probe = cluster.client.submit("approval", {}, debounce=Debounce("probe", 0.1))
    cluster.wait_for(
        lambda: cluster.client.get_run(probe).status is not RunStatus.PENDING,
        60,
        "the scheduler to start a debounced probe",
    )


def add(cluster: Cluster, name: str, workflow: str, **options: Any) -> None:
    spec = ScheduleSpec(name=name, cron=EVERY_SECOND, workflow=workflow, **options)
    cluster.client.schedules.add("default", spec)


def test_two_schedulers_one_killed_start_each_tick_once(cluster: Cluster) -> None:
    cluster.worker()
    first, second = cluster.scheduler(), cluster.scheduler()
    added = cluster.cli(
        "schedule", "add", "tick", "--workflow", "ticking", "--cron", EVERY_SECOND,
        "--overlap", "allow", "--catch-up", "30s",
        "--input", json.dumps({"ledger": str(cluster.ledger)}),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    cluster.wait_for(lambda: len(schedule_runs(cluster, "tick")) >= 4, 30, "four ticks")
    cluster.kill(first)  # SIGKILL, wherever it was in its pass
    killed_at = db_now(cluster)
    cluster.wait_for(
        lambda: max(tick_of(r.request_id) for r in schedule_runs(cluster, "tick")) > killed_at + 3,
        30,
        "ticks after the kill",
    )
    cluster.client.schedules.pause("default", "tick")
    time.sleep(0.5)  # a pass that had read the schedule before the pause ends
    runs = schedule_runs(cluster, "tick")
    ticks = sorted(tick_of(r.request_id) for r in runs)
    # One run per tick, and no tick between the first and the last left out.
    assert Counter(ticks).most_common(1)[0][1] == 1
    assert ticks == [ticks[0] + n for n in range(len(ticks))], ticks
    assert len(ticks) >= 7
    for run in runs:
        assert cluster.wait(run.id).status is RunStatus.SUCCEEDED
    executions = cluster.executions()
    assert all(executions[(run.id, "tick", 1)] == 1 for run in runs)  # each ran once
    assert second.poll() is None  # the survivor kept ticking alone
    shown = cluster.cli("schedule", "show", "tick", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["paused"] is True


def test_a_backfill_of_24_hourly_ticks_starts_24_runs_then_none(cluster: Cluster) -> None:
    cluster.worker()
    spec = ScheduleSpec(
        name="hourly", cron="0 * * * *", workflow="ticking", input={"ledger": str(cluster.ledger)}
    )
    cluster.client.schedules.add("default", spec)
    window = ["--start", "2026-11-01T00:00:00Z", "--end", "2026-11-02T00:00:00Z", "--json"]
    done = cluster.cli("schedule", "backfill", "hourly", *window)
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert (first["ticks"], first["created"], first["existing"]) == (24, 24, 0)
    day = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    again = cluster.client.schedules.backfill("default", "hourly", day, day + 86_400)
    assert (again.ticks, again.created, again.existing) == (24, 0, 24)
    assert again.run_ids == first["run_ids"]
    runs = schedule_runs(cluster, "hourly")
    assert len(runs) == 24
    assert {datetime.fromtimestamp(tick_of(r.request_id), UTC).hour for r in runs} == set(range(24))
    for run_id in first["run_ids"]:
        assert cluster.wait(run_id).status is RunStatus.SUCCEEDED


def test_each_overlap_policy_while_the_last_run_waits(cluster: Cluster) -> None:
    """Runs of `approval` wait for a signal: the previous run stays unfinished until the
    test approves it."""
    cluster.worker()
    cluster.scheduler()
    for policy in OverlapPolicy:
        add(cluster, policy.value, "approval", overlap=policy, catch_up_s=30)
    schedules = cluster.client.schedules

    def waiting(name: str) -> list[Any]:
        return [r for r in schedule_runs(cluster, name) if r.status == "waiting"]

    # allow: a run per tick, waiting side by side.
    cluster.wait_for(lambda: len(waiting("allow")) >= 3, 30, "allow's runs waiting")
    cluster.wait_for(
        lambda: len(schedule_runs(cluster, "cancel_running")) >= 3, 30, "cancel_running's ticks"
    )
    # skip: one run; the ticks since were skipped and counted.
    assert len(schedule_runs(cluster, "skip")) == 1
    assert schedules.get("default", "skip").skipped >= 2
    # buffer_one: one run, and one tick held for when it ends.
    held = schedules.get("default", "buffer_one")
    assert len(schedule_runs(cluster, "buffer_one")) == 1 and held.buffered_at is not None
    # cancel_running: each tick cancels the one before it; the newest goes on.
    schedules.pause("default", "cancel_running")
    assert len(schedule_runs(cluster, "cancel_running")) >= 3

    def replaced() -> bool:
        newest, *older = schedule_runs(cluster, "cancel_running")
        return newest.status in ("running", "waiting") and all(
            run.status == "cancelled" for run in older
        )

    cluster.wait_for(replaced, 30, "every run but the newest cancelled")

    # The buffered tick starts once the run before it ends, keyed by its own time.
    (first,) = schedule_runs(cluster, "buffer_one")
    cluster.wait_for(lambda: bool(waiting("buffer_one")), 30, "buffer_one's run to wait")
    cluster.client.signal(first.id, "approve")
    cluster.wait_for(lambda: len(schedule_runs(cluster, "buffer_one")) == 2, 30, "the buffer")
    started = schedule_runs(cluster, "buffer_one")[0]
    assert tick_of(started.request_id) == held.buffered_at
    # skip starts again at the first tick after its run ended.
    (skipped_run,) = schedule_runs(cluster, "skip")
    cluster.client.signal(skipped_run.id, "approve")
    cluster.wait_for(lambda: len(schedule_runs(cluster, "skip")) == 2, 30, "skip's next run")
    for policy in OverlapPolicy:
        schedules.pause("default", policy.value)


def test_ticks_missed_while_no_scheduler_ran_catch_up_within_the_window(
    cluster: Cluster,
) -> None:
    cluster.worker()
    add(cluster, "late", "ticking", overlap=OverlapPolicy.ALLOW, catch_up_s=3,
        input={"ledger": str(cluster.ledger)})  # fmt: skip
    created = cluster.client.schedules.get("default", "late").created_at
    time.sleep(6)  # no scheduler: six ticks come and go
    cluster.scheduler()
    cluster.wait_for(lambda: len(schedule_runs(cluster, "late")) >= 5, 30, "ticks to start")
    cluster.client.schedules.pause("default", "late")
    time.sleep(0.5)
    runs = schedule_runs(cluster, "late")
    row = cluster.client.schedules.get("default", "late")
    ticks = sorted(tick_of(r.request_id) for r in runs)
    for run in runs:  # none started later than the window allows after its tick
        started = to_epoch(run.created_at)
        assert started - tick_of(run.request_id) <= 3 + 0.5, (run.request_id, started)
    # The first ticks of the outage were skipped and counted; from the first started,
    # none is missing.
    assert ticks[0] - created >= 2
    assert row.skipped >= 2 and row.skipped == ticks[0] - (int(created) + 1)
    assert ticks == [ticks[0] + n for n in range(len(ticks))]


def test_debounce_collapses_rapid_submits_into_one_run_after_the_quiet_period(
    cluster: Cluster,
) -> None:
    cluster.worker()
    scheduler_up(cluster)
    debounce = Debounce("user-42", wait_s=1.5, max_wait_s=30)
    ids = []
    for n in range(6):
        ids.append(cluster.submit("chain10", {"n": n}, debounce=debounce))
        time.sleep(0.2)
    last_submit = db_now(cluster)
    assert len(set(ids)) == 1
    run_id = ids[0]
    assert cluster.client.get_run(run_id).status is RunStatus.PENDING
    view = cluster.wait(run_id)
    assert view.status is RunStatus.SUCCEEDED, cluster.log_tails()
    started = cluster.client.events(run_id)[0]
    assert started["type"] == "run_started" and started["data"]["input"]["n"] == 5
    # Started after the quiet period (one scheduler interval late at most, and slack).
    assert last_submit + 1.5 - 0.3 <= started["at"] <= last_submit + 1.5 + 2.0
    mine = [count for key, count in cluster.executions().items() if key[0] == run_id]
    assert mine == [1] * 10  # every node of the one run, once


def test_debounce_starts_no_later_than_max_wait(cluster: Cluster) -> None:
    cluster.worker()
    scheduler_up(cluster)
    debounce = Debounce("burst", wait_s=1.0, max_wait_s=2.5)
    first_at = db_now(cluster)
    ids = []
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline:  # never quiet for a whole wait
        ids.append(cluster.submit("chain10", {}, debounce=debounce))
        time.sleep(0.25)
    runs = list(dict.fromkeys(ids))
    assert len(runs) >= 2  # the first window closed at max_wait; later submits opened another
    started = cluster.client.events(runs[0])[0]
    assert started["type"] == "run_started"
    assert first_at + 2.5 - 0.3 <= started["at"] <= first_at + 2.5 + 1.5
    assert cluster.wait(runs[0]).status is RunStatus.SUCCEEDED


def test_singleton_skip_and_cancel_under_concurrent_submits(cluster: Cluster) -> None:
    cluster.worker()
    cluster.scheduler()

    def at_once(count: int, **options: Any) -> list[str]:
        barrier = threading.Barrier(count)
        found: list[str] = []
        errors: list[BaseException] = []

        def submit() -> None:
            try:
                barrier.wait()
                found.append(cluster.client.submit("approval", {}, **options))
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=submit) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads), "a submit took over 30 s"
        assert not errors, errors
        return found

    skipped = at_once(8, singleton=Singleton("acct-1"))
    assert len(set(skipped)) == 1  # one run; everyone got it
    only = skipped[0]
    assert holder(cluster, "acct-1") == only
    replaced = at_once(6, singleton=Singleton("acct-1", SingletonMode.CANCEL))
    assert len(set(replaced)) == 6 and only not in replaced
    runs = [only, *replaced]

    def settled() -> bool:
        statuses = [cluster.client.get_run(r).status for r in runs]
        return statuses.count(RunStatus.CANCELLED) == len(runs) - 1

    cluster.wait_for(settled, 30, "all but one run cancelled")
    (survivor,) = [r for r in runs if cluster.client.get_run(r).status is not RunStatus.CANCELLED]
    assert survivor in replaced
    assert holder(cluster, "acct-1") == survivor
    # A skip now answers with the survivor.
    assert cluster.client.submit("approval", {}, singleton=Singleton("acct-1")) == survivor
