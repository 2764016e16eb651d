"""Schedules computed by hand-moved time: cron ticks in a time zone (and across its
clock changes), the jitter every scheduler agrees on, the catch-up window and each
overlap policy (cairn.model.schedules.plan_ticks); the `schedules:` block of a
definition; and the schedules kept by the engine on the embedded store."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from cairn.definitions.loader import load_definition
from cairn.engine.sharing import Sharing
from cairn.errors import (
    InvalidInput,
    InvalidSchedule,
    ScheduleExists,
    ScheduleNotFound,
    UnknownWorkflow,
    WorkflowDefinitionError,
)
from cairn.model.schedules import (
    BUFFER_POLL_S,
    Cron,
    OverlapPolicy,
    ScheduleSpec,
    TickPlan,
    jitter_of,
    plan_ticks,
    tick_request_id,
)
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.testing.clock import FakeClock
from tests.support.embedded import settings

HOUR = 3600.0


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


# -- cron -------------------------------------------------------------------------------


def test_five_fields_tick_in_the_schedules_time_zone() -> None:
    weekly = Cron("0 9 * * MON", "Europe/Berlin")
    # 2026-12-07 is a Monday; 09:00 in Berlin in winter is 08:00 UTC.
    assert iso(weekly.next_after(at("2026-12-03 00:00:00")) or 0) == "2026-12-07 08:00:00"
    # In summer it is 07:00 UTC.
    assert iso(weekly.next_after(at("2026-06-02 00:00:00")) or 0) == "2026-06-08 07:00:00"


def test_six_fields_have_seconds_first() -> None:
    every_two = Cron("*/2 * * * * *")
    start = at("2026-12-03 10:00:00") + 0.5
    ticks = every_two.between(start, start + 7, limit=10)
    assert [iso(t) for t in ticks] == [
        "2026-12-03 10:00:02",
        "2026-12-03 10:00:04",
        "2026-12-03 10:00:06",
    ]
    # Strictly after: a tick exactly at the start is not "next".
    assert every_two.next_after(at("2026-12-03 10:00:02")) == at("2026-12-03 10:00:04")


def test_clocks_set_back_repeat_an_hourly_tick_not_a_daily_one() -> None:
    # Berlin leaves summer time on 2026-10-25: 02:00-03:00 happens twice.
    daily = Cron("30 2 * * *", "Europe/Berlin")
    ticks = daily.between(at("2026-10-24 00:00:00"), at("2026-10-27 00:00:00"), limit=10)
    assert len(ticks) == 3  # once a day, the repeated hour included
    hourly = Cron("0 * * * *", "Europe/Berlin")
    night = hourly.between(at("2026-10-24 23:30:00"), at("2026-10-25 03:30:00"), limit=10)
    berlin = ZoneInfo("Europe/Berlin")
    local = [datetime.fromtimestamp(t, berlin).strftime("%H:%M") for t in night]
    assert local == ["02:00", "02:00", "03:00", "04:00"]  # each real hour ticks
    assert all(b - a == HOUR for a, b in itertools.pairwise(night))


def test_clocks_set_forward_skip_no_day() -> None:
    # 2026-03-29 02:30 does not exist in Berlin; the tick comes at 03:00 instead.
    daily = Cron("30 2 * * *", "Europe/Berlin")
    ticks = daily.between(at("2026-03-28 00:00:00"), at("2026-03-31 00:00:00"), limit=10)
    assert len(ticks) == 3


@pytest.mark.parametrize(
    ("expression", "timezone", "says"),
    [
        ("*/2 * * *", "UTC", "4 fields"),
        ("* * * * * * *", "UTC", "7 fields"),
        ("61 * * * *", "UTC", "does not parse"),
        ("0 0 30 2 *", "UTC", "never matches"),
        ("0 9 * * MON", "Mars/Olympus", "unknown time zone"),
        ("", "UTC", "is text"),
    ],
)
def test_a_bad_cron_or_zone_is_a_typed_error(expression: str, timezone: str, says: str) -> None:
    with pytest.raises(InvalidSchedule, match=says) as refused:
        Cron(expression, timezone)
    assert refused.value.code == "invalid_schedule"


def test_a_range_has_a_limit() -> None:
    with pytest.raises(InvalidSchedule, match="more than 10"):
        Cron("* * * * * *").between(0, 60, limit=10)


def test_overlap_policies_parse_or_refuse() -> None:
    assert OverlapPolicy.parse("buffer_one") is OverlapPolicy.BUFFER_ONE
    with pytest.raises(InvalidSchedule, match="skip, buffer_one, cancel_running, allow"):
        OverlapPolicy.parse("queue")


# -- jitter -----------------------------------------------------------------------------


def test_jitter_is_the_same_for_every_scheduler_and_within_bounds() -> None:
    ticks = [at("2026-12-03 09:00:00") + HOUR * n for n in range(200)]
    delays = [jitter_of("default/nightly", t, 60.0) for t in ticks]
    assert delays == [jitter_of("default/nightly", t, 60.0) for t in ticks]
    assert all(0 <= d < 60 for d in delays)
    assert len({round(d, 6) for d in delays}) > 190  # spread, not one value
    assert jitter_of("default/nightly", ticks[0], 0) == 0
    assert jitter_of("other/nightly", ticks[0], 60) != delays[0]


def test_a_ticks_request_id_names_the_schedule_and_the_time() -> None:
    assert tick_request_id("nightly", at("2026-12-03 09:00:00")) == (
        "schedule:nightly:2026-12-03T09:00:00Z"
    )


# -- what is due, with a clock moved by hand ---------------------------------------------


def plan(
    clock: FakeClock,
    policy: OverlapPolicy = OverlapPolicy.SKIP,
    *,
    ticks_from: float,
    cron: str = "* * * * * *",
    catch_up_s: float = 3600,
    jitter_s: float = 0.0,
    buffered: float | None = None,
    active: bool = False,
    scan: int = 2000,
) -> TickPlan:
    return plan_ticks(
        Cron(cron),
        policy,
        key="default/s",
        catch_up_s=catch_up_s,
        jitter_s=jitter_s,
        ticks_from=ticks_from,
        buffered=buffered,
        previous_active=active,
        now=clock(),
        scan=scan,
    )


def actions(result: TickPlan) -> list[str]:
    return [d.action.value for d in result.decisions]


def test_nothing_is_due_before_the_first_tick() -> None:
    clock = FakeClock(at("2026-12-03 09:00:00") + 0.2)
    result = plan(clock, ticks_from=clock())
    assert result.decisions == () and result.next_at == at("2026-12-03 09:00:01")
    clock.advance(0.8)
    result = plan(clock, ticks_from=result.ticks_from)
    assert actions(result) == ["start"] and result.ticks_from == at("2026-12-03 09:00:01")


def test_ticks_missed_beyond_the_catch_up_window_are_skipped() -> None:
    start = at("2026-12-03 09:00:00")
    clock = FakeClock(start + 10.5)  # ten ticks came while no scheduler ran
    result = plan(clock, OverlapPolicy.ALLOW, ticks_from=start, catch_up_s=3)
    assert actions(result) == ["skip_late"] * 7 + ["start"] * 3
    assert [iso(d.tick)[-2:] for d in result.decisions if d.action.starts] == ["08", "09", "10"]
    assert result.ticks_from == start + 10 and result.next_at == start + 11


def test_skip_skips_while_the_previous_run_is_unfinished() -> None:
    start = at("2026-12-03 09:00:00")
    clock = FakeClock(start + 3.5)
    assert actions(plan(clock, ticks_from=start, active=True)) == ["skip_overlap"] * 3
    # Idle, the first due tick starts and the ones due with it meet its run.
    assert actions(plan(clock, ticks_from=start)) == ["start", "skip_overlap", "skip_overlap"]


def test_buffer_one_keeps_one_tick_until_the_run_ends() -> None:
    start = at("2026-12-03 09:00:00")
    clock = FakeClock(start + 2.5)
    held = plan(clock, OverlapPolicy.BUFFER_ONE, ticks_from=start, active=True)
    assert actions(held) == ["buffer", "skip_overlap"]
    assert held.buffered == start + 1
    # It looks again for the run's end soon, or at the next tick if that is sooner.
    assert held.next_at == min(start + 3, clock() + BUFFER_POLL_S)
    clock.advance(0.3)
    polled = plan(
        clock,
        OverlapPolicy.BUFFER_ONE,
        ticks_from=held.ticks_from,
        buffered=held.buffered,
        active=True,
    )
    assert polled.decisions == () and polled.buffered == held.buffered
    # Still running at the next tick: the buffer is full, the new tick is skipped.
    clock.advance(0.7)
    still = plan(
        clock,
        OverlapPolicy.BUFFER_ONE,
        ticks_from=polled.ticks_from,
        buffered=held.buffered,
        active=True,
    )
    assert actions(still) == ["skip_overlap"] and still.buffered == start + 1
    # The run ended: the buffered tick starts first, and the one due now meets it.
    clock.advance(1)
    freed = plan(
        clock, OverlapPolicy.BUFFER_ONE, ticks_from=still.ticks_from, buffered=still.buffered
    )
    assert [(d.action.value, d.tick - start) for d in freed.decisions] == [
        ("start", 1.0),
        ("buffer", 4.0),
    ]


def test_cancel_running_cancels_then_starts_only_the_last_due_tick() -> None:
    start = at("2026-12-03 09:00:00")
    clock = FakeClock(start + 3.5)
    result = plan(clock, OverlapPolicy.CANCEL_RUNNING, ticks_from=start, active=True)
    assert actions(result) == ["superseded", "superseded", "cancel_and_start"]
    assert result.decisions[-1].tick == start + 3
    assert actions(plan(clock, OverlapPolicy.CANCEL_RUNNING, ticks_from=start + 2)) == ["start"]


def test_allow_starts_every_tick() -> None:
    start = at("2026-12-03 09:00:00")
    clock = FakeClock(start + 3.5)
    result = plan(clock, OverlapPolicy.ALLOW, ticks_from=start, active=True)
    assert actions(result) == ["start"] * 3


def test_jitter_delays_a_tick_by_its_own_amount() -> None:
    start = at("2026-12-03 09:00:00")
    delay = jitter_of("default/s", start + 60, 30.0)
    clock = FakeClock(start + 60 + delay - 0.01)
    early = plan(clock, ticks_from=start, cron="* * * * *", jitter_s=30)
    assert early.decisions == () and early.next_at == pytest.approx(start + 60 + delay)
    clock.advance(0.02)
    due = plan(clock, ticks_from=start, cron="* * * * *", jitter_s=30)
    assert actions(due) == ["start"] and due.decisions[0].tick == start + 60


def test_a_long_outage_is_walked_a_bounded_stretch_at_a_time() -> None:
    start = at("2026-12-03 09:00:00")
    clock = FakeClock(start + 7200)  # two hours of a per-second schedule
    first = plan(clock, ticks_from=start, catch_up_s=5, scan=1000)
    assert actions(first) == ["skip_late"] * 1000
    assert first.next_at == clock() and first.ticks_from == start + 1000
    walked, cursor = 1000, first.ticks_from
    while True:
        step = plan(clock, ticks_from=cursor, catch_up_s=5, scan=20_000)
        walked += len(step.decisions)
        cursor = step.ticks_from
        if step.next_at != clock():
            break
    assert cursor == start + 7200 and walked == 7200
    # The last five seconds are within the window: the first starts, its run overlaps.
    assert actions(step)[-7:] == ["skip_late", "start"] + ["skip_overlap"] * 5


# -- the schedules: block ---------------------------------------------------------------

BASE: dict[str, Any] = {
    "name": "report",
    "version": 1,
    "start": "a",
    "nodes": {
        "a": {"handler": "tests.integration.handlers:step", "next": "done"},
        "done": {"end": "succeeded"},
    },
}


def test_a_definition_declares_schedules() -> None:
    definition = load_definition(
        {
            **BASE,
            "schedules": [
                {
                    "name": "weekly",
                    "cron": "0 9 * * MON",
                    "timezone": "Europe/Berlin",
                    "input": {"team": "a"},
                    "overlap": "buffer_one",
                    "catch_up": "2h",
                    "jitter": "5m",
                },
                {"name": "often", "cron": "*/10 * * * * *"},
            ],
        }
    )
    weekly, often = definition.schedules
    assert weekly == ScheduleSpec(
        name="weekly",
        cron="0 9 * * MON",
        timezone="Europe/Berlin",
        input={"team": "a"},
        overlap=OverlapPolicy.BUFFER_ONE,
        catch_up_s=7200,
        jitter_s=300,
    )
    assert often.overlap is OverlapPolicy.SKIP and often.catch_up_s == 86_400
    # Not part of what a version pins: the same version may change its schedules.
    assert "schedules" not in definition.spec
    assert load_definition(BASE).spec == definition.spec


def test_schedule_faults_are_reported_with_every_other() -> None:
    with pytest.raises(WorkflowDefinitionError) as refused:
        load_definition(
            {
                **BASE,
                "schedules": [
                    {"name": "a", "cron": "*/2 * * *", "overlap": "alow", "cach_up": "1h"},
                    {"name": "b", "cron": "0 9 * * *", "timezone": "Mars/Olympus"},
                    {"name": "c", "cron": "0 9 * * *"},
                    {"name": "c", "cron": "0 10 * * *"},
                    {"cron": "0 9 * * *"},
                ],
            }
        )
    text = str(refused.value)
    assert refused.value.codes.count("bad_schedule") == 4
    assert "unknown key 'cach_up' in 'schedules[0]' (did you mean 'catch_up'?)" in text
    assert "4 fields" in text and "'alow' is not one of" in text and "Mars/Olympus" in text
    assert "schedule 'c' is declared twice" in text and "duplicate_name" in refused.value.codes


def test_schedules_came_in_format_2() -> None:
    with pytest.raises(WorkflowDefinitionError) as refused:
        load_definition({**BASE, "format": 1, "schedules": [{"name": "a", "cron": "0 9 * * *"}]})
    assert "newer_key" in refused.value.codes


# -- kept by the engine (embedded store) --------------------------------------------------


@pytest.fixture
def runtime(tmp_path: Path) -> Any:
    built = Runtime.build(settings(tmp_path))
    yield built
    built.close()


def test_adding_checks_the_workflow_the_cron_and_the_input(runtime: Runtime) -> None:
    schedules = runtime.orchestrator.schedules
    with pytest.raises(UnknownWorkflow):
        schedules.add("default", ScheduleSpec(name="x", cron="0 9 * * *", workflow="nope"))
    with pytest.raises(InvalidSchedule):
        schedules.add("default", ScheduleSpec(name="x", cron="0 9 * *", workflow="approval"))
    with pytest.raises(InvalidInput, match="input does not match"):
        schedules.add(
            "default",
            ScheduleSpec(name="x", cron="0 9 * * *", workflow="chain10", input={"ledger": 1}),
        )
    with pytest.raises(InvalidSchedule, match="name"):
        schedules.add("default", ScheduleSpec(name="no spaces", cron="0 9 * * *", workflow="x"))
    added = schedules.add("default", ScheduleSpec(name="x", cron="0 9 * * *", workflow="approval"))
    assert added.next_at is not None and iso(added.next_at).endswith("09:00:00")
    with pytest.raises(ScheduleExists):
        schedules.add("default", ScheduleSpec(name="x", cron="0 10 * * *", workflow="approval"))
    # Another namespace has names of its own — and workflows: the default namespace's is
    # unknown to it until it is shared with it.
    with pytest.raises(UnknownWorkflow):
        schedules.add("other", ScheduleSpec(name="x", cron="0 10 * * *", workflow="approval"))
    Sharing(runtime.store).share("default", "approval", "other", None, by="db:test")
    other = schedules.add(
        "other", ScheduleSpec(name="x", cron="0 10 * * *", workflow="default/approval")
    )
    assert other.workflow == "default/approval"
    assert [s.name for s in schedules.of_namespace("default")] == ["x"]


def test_change_pause_resume_delete(runtime: Runtime) -> None:
    schedules = runtime.orchestrator.schedules
    schedules.add("default", ScheduleSpec(name="x", cron="0 9 * * *", workflow="approval"))
    changed = schedules.change("default", "x", {"cron": "30 7 * * *", "jitter_s": 10.0})
    assert changed.cron == "30 7 * * *" and changed.jitter_s == 10
    assert changed.next_at is not None and iso(changed.next_at)[11:16] == "07:30"
    with pytest.raises(InvalidSchedule):
        schedules.change("default", "x", {"overlap": "sometimes"})
    with pytest.raises(InvalidSchedule, match="no paused"):
        schedules.change("default", "x", {"paused": True})
    assert schedules.pause("default", "x").paused
    resumed = schedules.resume("default", "x")
    assert not resumed.paused and resumed.ticks_from >= changed.ticks_from
    schedules.delete("default", "x")
    with pytest.raises(ScheduleNotFound):
        schedules.get("default", "x")
    with pytest.raises(ScheduleNotFound):
        schedules.delete("default", "x")


def test_register_declares_and_updates_a_definitions_schedules(runtime: Runtime) -> None:
    registry = runtime.orchestrator.registry
    schedules = runtime.orchestrator.schedules
    first = load_definition({**BASE, "schedules": [{"name": "r", "cron": "0 9 * * *"}]})
    registry.register(first)
    (kept,) = schedules.declare("default", first)
    assert kept.workflow == "report" and kept.version is None
    schedules.pause("default", "r")
    # The same version with another schedule: registered as it was, the schedule changed.
    second = load_definition(
        {**BASE, "schedules": [{"name": "r", "cron": "0 10 * * *", "overlap": "allow"}]}
    )
    assert not registry.register(second)
    (changed,) = schedules.declare("default", second)
    assert changed.cron == "0 10 * * *" and changed.overlap == "allow"
    assert changed.paused  # its state is the operator's


def test_a_declared_schedule_keeps_an_operators_changes_until_its_declaration_changes(
    runtime: Runtime,
) -> None:
    registry = runtime.orchestrator.registry
    schedules = runtime.orchestrator.schedules
    nine = {"name": "r", "cron": "0 9 * * *", "timezone": "UTC"}
    first = load_definition({**BASE, "schedules": [nine]})
    registry.register(first)
    (added,) = schedules.declare("default", first)
    assert added.declared is not None and added.declared["cron"] == "0 9 * * *"
    schedules.pause("default", "r")  # an operator's pause and change
    schedules.change("default", "r", {"timezone": "Europe/Berlin", "jitter_s": 30.0})
    (again,) = schedules.declare("default", first)  # a restart registers the same file
    assert again.paused and again.timezone == "Europe/Berlin" and again.jitter_s == 30
    # A deploy whose file changes the cron: the cron is the file's now; what the file
    # still says as before stays as the operator left it.
    second = load_definition({**BASE, "schedules": [{**nine, "cron": "0 10 * * *"}]})
    (deployed,) = schedules.declare("default", second)
    assert deployed.cron == "0 10 * * *" and deployed.declared == {
        **added.declared,
        "cron": "0 10 * * *",
    }
    assert deployed.timezone == "Europe/Berlin" and deployed.jitter_s == 30 and deployed.paused
    # A schedule added by hand, then declared by a file: the file's from then on.
    schedules.add("default", ScheduleSpec(name="h", cron="0 8 * * *", workflow="report"))
    third = load_definition({**BASE, "schedules": [{"name": "h", "cron": "0 7 * * *"}]})
    (adopted,) = schedules.declare("default", third)
    assert adopted.cron == "0 7 * * *" and adopted.declared is not None


def test_a_process_registers_its_definitions_schedules_at_start(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    spec = {**BASE, "schedules": [{"name": "nightly", "cron": "0 3 * * *"}]}
    (flows / "report.json").write_text(json.dumps(spec))
    home = tmp_path / "home"
    built = Runtime.build(settings(home, workflows=[str(flows)], workflows_namespace="reports"))
    try:
        schedules = built.orchestrator.schedules
        assert schedules.get("reports", "nightly").cron == "0 3 * * *"
        schedules.pause("reports", "nightly")
    finally:
        built.close()
    again = Runtime.build(settings(home, workflows=[str(flows)], workflows_namespace="reports"))
    try:
        assert again.orchestrator.schedules.get("reports", "nightly").paused
    finally:
        again.close()


def test_a_backfill_starts_every_tick_once(runtime: Runtime) -> None:
    schedules = runtime.orchestrator.schedules
    schedules.add("default", ScheduleSpec(name="h", cron="0 * * * *", workflow="approval"))
    day = at("2026-11-01 00:00:00")
    done = schedules.backfill("default", "h", day, day + 24 * HOUR)
    assert (done.ticks, done.created, done.existing) == (24, 24, 0)
    again = schedules.backfill("default", "h", day, day + 24 * HOUR)
    assert (again.ticks, again.created, again.existing) == (24, 0, 24)
    assert again.run_ids == done.run_ids
    run = runtime.orchestrator.get_run(done.run_ids[0])
    assert run.request_id == "schedule:h:2026-11-01T00:00:00Z"
    assert run.status is RunStatus.RUNNING  # started: its first node is dispatched
    with pytest.raises(InvalidSchedule):
        schedules.backfill("default", "h", day, day)


def test_the_overlap_decision_is_recorded_on_the_schedule(
    runtime: Runtime, wall_clock: FakeClock
) -> None:
    """Ticks looked at through the engine, by the database's clock (SQLite's is this
    process's wall clock, moved here by hand): a per-second schedule whose runs wait
    (approval) skips while the last one is unfinished."""
    schedules = runtime.orchestrator.schedules
    schedules.add("default", ScheduleSpec(name="s", cron="* * * * * *", workflow="approval"))
    started: list[str] = []
    skipped = 0
    for _ in range(50):  # 2.5 s, a look every 50 ms
        ticked = schedules.tick("default", "s")
        if ticked is not None:
            started += ticked.started
            skipped += ticked.skipped
        wall_clock.advance(0.05)
    assert len(started) == 1  # the first run waits for a signal: every later tick skips
    row = schedules.get("default", "s")
    assert row.last_run_id == started[0] and row.skipped == skipped >= 1
    assert tick_request_id("s", row.last_tick_at or 0) == (
        runtime.orchestrator.get_run(started[0]).request_id
    )
