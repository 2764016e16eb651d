"""A definition's ``schedules``: cron schedules that start runs of it, each a closed
mapping ``{name, cron, input, overlap, catch_up, jitter, timezone}`` (format 2). Kept by
``cairn register``; see docs/flow-control.md."""

from __future__ import annotations

from collections.abc import Mapping

from cairn.definitions import format as fmt
from cairn.definitions.reader import Reader
from cairn.errors import InvalidSchedule
from cairn.model.schedules import (
    DEFAULT_CATCH_UP,
    Cron,
    OverlapPolicy,
    ScheduleSpec,
    check_name,
    seconds_of,
)


def read_schedules(reader: Reader, raw: object) -> tuple[ScheduleSpec, ...]:
    """The declared schedules; every fault recorded on ``reader`` (``bad_schedule``)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        reader.fault("bad_schedule", "'schedules' is a list of {name, cron, ...} mappings")
        return ()
    found: list[ScheduleSpec] = []
    names: set[str] = set()
    for index, entry in enumerate(raw):
        where = f"schedules[{index}]"
        if not isinstance(entry, Mapping):
            reader.fault("bad_schedule", f"{where} is a mapping with 'name' and 'cron'")
            continue
        reader.closed(entry, fmt.SCHEDULE, "schedule", None, where=where)
        spec = _read_one(reader, entry, where)
        if spec is None:
            continue
        if spec.name in names:
            reader.fault("duplicate_name", f"schedule {spec.name!r} is declared twice")
            continue
        names.add(spec.name)
        found.append(spec)
    return tuple(found)


def _read_one(reader: Reader, entry: Mapping[object, object], where: str) -> ScheduleSpec | None:
    faults = 0

    def bad(message: str) -> None:
        nonlocal faults
        faults += 1
        reader.fault("bad_schedule", f"{where}: {message}")

    name = entry.get("name")
    try:
        check_name(name)
    except InvalidSchedule as exc:
        bad(str(exc))
    cron = entry.get("cron")
    timezone = entry.get("timezone", "UTC")
    if not isinstance(timezone, str):
        bad(f"'timezone' is an IANA time zone name, got {timezone!r}")
        timezone = "UTC"
    try:
        Cron(cron if isinstance(cron, str) else "", timezone)
    except InvalidSchedule as exc:
        bad(str(exc) if cron is not None else "'cron' is required")
    run_input = entry.get("input", {})
    if not isinstance(run_input, Mapping):
        bad("'input' is a mapping (the run's input)")
        run_input = {}
    overlap = OverlapPolicy.SKIP
    try:
        overlap = OverlapPolicy.parse(entry.get("overlap", OverlapPolicy.SKIP.value))
    except InvalidSchedule as exc:
        bad(str(exc))
    catch_up = DEFAULT_CATCH_UP.total_seconds()
    jitter = 0.0
    try:
        if entry.get("catch_up") is not None:
            catch_up = seconds_of(entry["catch_up"], "catch_up")
        if entry.get("jitter") is not None:
            jitter = seconds_of(entry["jitter"], "jitter", allow_zero=True)
    except InvalidSchedule as exc:
        bad(str(exc))
    if faults:
        return None
    return ScheduleSpec(
        name=str(name),
        cron=str(cron),
        timezone=timezone,
        input={str(key): value for key, value in run_input.items()},
        overlap=overlap,
        catch_up_s=catch_up,
        jitter_s=jitter,
    )
