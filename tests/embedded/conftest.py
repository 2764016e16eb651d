"""The embedded suite: cairn in the test's own process with its threads — the embedded
runtime's workers and in-process broker, its scheduler and notifier, heartbeats, deadline
watchers, the async-handler loop, the console and API over TestClient against a running
runtime, the model stand-in and webhook receivers serving on threads — and real time:
waits for a run to end, a retry's backoff, a timed block. No services, and no process of
cairn's (the one other process is croniter's, whose import asks ``file`` once for the
interpreter's word size). What runs without threads or waiting is in tests/unit, whose
guard sends a test here; the fixtures both suites use are in tests/support/in_process.py."""

from __future__ import annotations

from tests.support.in_process import (
    _empty_sqlite_migrates_from_the_template,
    _shared_workflows_parsed_once,
    migrated,
    store,
    wall_clock,
)

__all__ = [
    "_empty_sqlite_migrates_from_the_template",
    "_shared_workflows_parsed_once",
    "migrated",
    "store",
    "wall_clock",
]
