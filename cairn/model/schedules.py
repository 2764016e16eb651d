"""Schedules as a pure computation: a cron expression in a time zone, the ticks it makes,
the delay jitter adds to each, and what a scheduler does with the ticks that are due —
start, skip, buffer — given the overlap policy and the catch-up window. No clock is read
here: the time comes in as an argument (the database's, in production), so the same
inputs give every scheduler the same answer, and a test moves time by hand.

The cron expressions are croniter's (a well-kept library, not a parser of our own): five
fields, or six with seconds first (``*/2 * * * * *``: every two seconds).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cairn.errors import InvalidSchedule
from cairn.model.durations import parse_duration

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# A tick missed by longer than this (no scheduler ran) is skipped, not started late: a
# day covers a night's outage, and after a longer one a flood of stale runs helps nobody.
DEFAULT_CATCH_UP = timedelta(days=1)
# How many ticks one look at a schedule walks through at most (late ones included), so a
# pass stays short after a long outage of a schedule that ticks every second; the rest
# are walked by the next passes.
MAX_SCAN = 2_000
# The largest backfill one request may ask for.
MAX_BACKFILL = 10_000
# Bounds that keep every time a schedule computes inside what a timestamp column holds.
MAX_CATCH_UP_S = 366 * 86400.0
MAX_JITTER_S = 7 * 86400.0
# How often a schedule holding a buffered tick looks whether the run before it has ended.
BUFFER_POLL_S = 1.0
FIELDS = (5, 6)


class OverlapPolicy(StrEnum):
    """What a tick does while the schedule's previous run has not ended."""

    SKIP = "skip"  # the tick is skipped
    BUFFER_ONE = "buffer_one"  # it waits for the run to end (one such tick at most)
    CANCEL_RUNNING = "cancel_running"  # the running one is cancelled, then it starts
    ALLOW = "allow"  # it starts regardless

    @classmethod
    def parse(cls, raw: object) -> OverlapPolicy:
        try:
            return cls(str(raw))
        except ValueError:
            known = ", ".join(policy.value for policy in cls)
            raise InvalidSchedule(f"overlap policy {raw!r} is not one of {known}") from None


class Cron:
    """A cron expression in a time zone; ticks are epoch seconds (UTC instants)."""

    def __init__(self, expression: str, timezone: str = "UTC") -> None:
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidSchedule(f"a cron expression is text, got {expression!r}")
        self.expression = " ".join(expression.split())
        self.timezone = timezone
        try:
            self.zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
            raise InvalidSchedule(f"unknown time zone {timezone!r} (an IANA name)") from None
        count = len(self.expression.split())
        if count not in FIELDS and not self.expression.startswith("@"):
            raise InvalidSchedule(
                f"cron {self.expression!r}: {count} fields; five (minute hour day month "
                "weekday), or six with seconds first"
            )
        self.seconds = count == 6
        # croniter is imported by the first schedule read, not by every process that
        # imports the definitions' model (a command line's start).
        from croniter import (  # noqa: PLC0415
            CroniterBadCronError,
            CroniterBadDateError,
            CroniterError,
        )

        try:
            probe = self._iterator(datetime(2000, 1, 1, tzinfo=UTC).timestamp())
            probe.get_next(datetime)
        except CroniterBadDateError:
            raise InvalidSchedule(f"cron {self.expression!r} never matches a date") from None
        except (CroniterBadCronError, CroniterError, ValueError, LookupError) as exc:
            raise InvalidSchedule(f"cron {self.expression!r} does not parse: {exc}") from None
        except Exception as exc:  # croniter is not ours: any refusal is a bad expression
            raise InvalidSchedule(f"cron {self.expression!r} does not parse ({exc!r})") from None
        hours = probe.expanded[1]
        # Clocks set back repeat an hour. An hourly expression ticks in both (they are two
        # real hours); one that names its hours ticks once, as cron does, not twice.
        self._fixed_hours = not (hours == ["*"] or len(hours) == 24)

    def _iterator(self, after: float) -> Any:
        from croniter import croniter  # noqa: PLC0415

        start = datetime.fromtimestamp(after, self.zone)
        return croniter(self.expression, start, ret_type=datetime, second_at_beginning=self.seconds)

    def next_after(self, after: float) -> float | None:
        """The first tick strictly after ``after``; None if there is none."""
        ticks = self.iterate(after)
        return next(ticks, None)

    def iterate(self, after: float) -> Any:
        """The ticks strictly after ``after``, in order (an iterator of epoch seconds)."""
        from croniter import CroniterBadDateError  # noqa: PLC0415

        iterator = self._iterator(after)
        while True:
            try:
                tick: datetime = iterator.get_next(datetime)
            except CroniterBadDateError:
                return
            if tick.fold and self._fixed_hours:
                continue
            at = tick.timestamp()
            if at > after:
                yield at

    def between(self, start: float, end: float, limit: int) -> list[float]:
        """The ticks in ``[start, end)``; InvalidSchedule if there are more than
        ``limit``."""
        found: list[float] = []
        for at in self.iterate(start - 1):  # ticks are whole seconds: none is missed
            if at < start:
                continue
            if at >= end:
                break
            if len(found) == limit:
                raise InvalidSchedule(
                    f"cron {self.expression!r} ticks more than {limit:,} times in that range"
                )
            found.append(at)
        return found


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InvalidSchedule(
            f"a schedule's name is 1-100 letters, digits, '.', '_' or '-', got {name!r}"
        )
    return name


def seconds_of(value: object, what: str, *, allow_zero: bool = False) -> float:
    """A duration (``"30s"``, a number of seconds, a timedelta) as seconds."""
    if allow_zero and value in (0, 0.0, "0", "0s"):
        return 0.0
    try:
        return parse_duration(value).total_seconds()
    except (ValueError, OverflowError) as exc:
        raise InvalidSchedule(f"{what}: {exc}") from None


def jitter_of(key: str, tick: float, jitter_s: float) -> float:
    """How long tick ``tick`` of the schedule ``key`` waits past its time: a fraction of
    ``jitter_s`` derived from the two, so every scheduler computes the same delay."""
    if jitter_s <= 0:
        return 0.0
    digest = hashlib.sha256(f"{key}@{tick:.3f}".encode()).digest()
    return jitter_s * int.from_bytes(digest[:8], "big") / 2**64


def tick_label(tick: float) -> str:
    """A tick's time as it appears in its runs' request ids: UTC, to the second."""
    moment = datetime.fromtimestamp(tick, UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond // 1000:03d}"
    return text + "Z"


def tick_request_id(name: str, tick: float) -> str:
    """The request id of the run of tick ``tick`` of schedule ``name``: the same tick is
    the same run, however many schedulers (or backfills) start it."""
    return f"schedule:{name}:{tick_label(tick)}"


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as declared (in a definition, on the command line, over HTTP)."""

    name: str
    cron: str
    workflow: str = ""
    version: int | None = None
    timezone: str = "UTC"
    input: Mapping[str, Any] = field(default_factory=dict)
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    catch_up_s: float = DEFAULT_CATCH_UP.total_seconds()
    jitter_s: float = 0.0

    def checked(self) -> ScheduleSpec:
        """This spec, or InvalidSchedule naming what is wrong."""
        check_name(self.name)
        Cron(self.cron, self.timezone)
        OverlapPolicy.parse(self.overlap)
        if not (0 < self.catch_up_s <= MAX_CATCH_UP_S):
            raise InvalidSchedule(
                f"catch_up must be positive and at most 366 days, got {self.catch_up_s!r} s"
            )
        if not (0 <= self.jitter_s <= MAX_JITTER_S):
            raise InvalidSchedule(f"jitter must be zero to 7 days, got {self.jitter_s!r} s")
        if not isinstance(self.input, Mapping):
            raise InvalidSchedule("a schedule's input is a JSON object")
        return self


class TickAction(StrEnum):
    START = "start"
    CANCEL_AND_START = "cancel_and_start"  # cancel_running: the previous run is cancelled
    BUFFER = "buffer"  # buffer_one: kept until the previous run ends
    SKIP_LATE = "skip_late"  # missed by more than the catch-up window
    SKIP_OVERLAP = "skip_overlap"  # the previous run has not ended (skip; a full buffer)
    SUPERSEDED = "superseded"  # cancel_running: a later tick, due too, starts instead

    @property
    def starts(self) -> bool:
        return self in (TickAction.START, TickAction.CANCEL_AND_START)

    @property
    def skipped(self) -> bool:
        return self in (TickAction.SKIP_LATE, TickAction.SKIP_OVERLAP, TickAction.SUPERSEDED)


@dataclass(frozen=True)
class TickDecision:
    tick: float  # the scheduled time: the run's key
    action: TickAction
    due: float  # the tick plus its jitter


@dataclass(frozen=True)
class TickPlan:
    """What one look at a schedule decided, and where the next look starts."""

    decisions: tuple[TickDecision, ...]
    ticks_from: float  # ticks after this are still to come
    buffered: float | None  # the tick waiting for the previous run to end
    next_at: float | None  # when to look again (None: the cron has no more ticks)


@dataclass(frozen=True)
class _Walk:
    late: list[TickDecision]  # due longer ago than the catch-up window: skipped
    due: list[TickDecision]  # due now, before the overlap policy
    cursor: float  # the last tick walked
    next_at: float | None  # when to look again


def _walk(
    cron: Cron,
    key: str,
    *,
    jitter_s: float,
    catch_up_s: float,
    ticks_from: float,
    now: float,
    scan: int,
) -> _Walk:
    """The ticks after ``ticks_from`` due at ``now``, at most ``scan`` of them."""
    late: list[TickDecision] = []
    due_now: list[TickDecision] = []
    cursor = ticks_from
    next_at: float | None = None
    for walked, at in enumerate(cron.iterate(ticks_from), start=1):
        due = at + jitter_of(key, at, jitter_s)
        if due > now:
            next_at = due
            break
        cursor = at
        if now - due > catch_up_s:
            late.append(TickDecision(at, TickAction.SKIP_LATE, due))
        else:
            due_now.append(TickDecision(at, TickAction.START, due))
        if walked >= scan:
            next_at = now  # more to walk: look again at once
            break
    return _Walk(late, due_now, cursor, next_at)


def _overlapping(
    policy: OverlapPolicy, due_now: list[TickDecision], active: bool, buffered: float | None
) -> tuple[list[TickDecision], float | None]:
    """What the overlap policy makes of the ticks due now; the tick buffered after."""
    decisions: list[TickDecision] = []
    if policy is OverlapPolicy.CANCEL_RUNNING and due_now:
        for early in due_now[:-1]:
            decisions.append(TickDecision(early.tick, TickAction.SUPERSEDED, early.due))
        last = due_now[-1]
        action = TickAction.CANCEL_AND_START if active else TickAction.START
        decisions.append(TickDecision(last.tick, action, last.due))
        return decisions, buffered
    for tick in due_now:
        if not active or policy is OverlapPolicy.ALLOW:
            decisions.append(tick)
            active = True
        elif policy is OverlapPolicy.BUFFER_ONE and buffered is None:
            buffered = tick.tick
            decisions.append(TickDecision(tick.tick, TickAction.BUFFER, tick.due))
        else:
            decisions.append(TickDecision(tick.tick, TickAction.SKIP_OVERLAP, tick.due))
    return decisions, buffered


def plan_ticks(
    cron: Cron,
    policy: OverlapPolicy,
    *,
    key: str,
    catch_up_s: float,
    jitter_s: float,
    ticks_from: float,
    buffered: float | None,
    previous_active: bool,
    now: float,
    scan: int = MAX_SCAN,
) -> TickPlan:
    """The ticks of ``cron`` after ``ticks_from`` that are due at ``now`` (a tick is due
    once its time plus its jitter has come), and what to do with each.

    A tick due longer ago than ``catch_up_s`` (no scheduler ran then) is skipped. The
    others meet the overlap policy: while the schedule's previous run is not terminal
    (``previous_active``) — and a run started here counts as not terminal — ``skip``
    skips, ``buffer_one`` keeps one tick (``buffered``) until the run ends and skips any
    more, ``cancel_running`` cancels the run and starts the tick, ``allow`` starts it.
    Of several ticks due at once, ``cancel_running`` starts only the last (the earlier
    ones would be cancelled at once). A buffered tick starts first, once the run before
    it has ended.
    """
    decisions: list[TickDecision] = []
    active = previous_active
    if buffered is not None and not active:
        decisions.append(TickDecision(buffered, TickAction.START, buffered))
        buffered = None
        active = True
    walk = _walk(
        cron,
        key,
        jitter_s=jitter_s,
        catch_up_s=catch_up_s,
        ticks_from=ticks_from,
        now=now,
        scan=scan,
    )
    decisions += walk.late
    met, buffered = _overlapping(policy, walk.due, active, buffered)
    decisions += met
    next_at, cursor = walk.next_at, walk.cursor
    if buffered is not None:
        poll = now + BUFFER_POLL_S
        next_at = poll if next_at is None else min(next_at, poll)
    return TickPlan(tuple(decisions), cursor, buffered, next_at)
