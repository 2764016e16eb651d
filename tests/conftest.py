"""Fixtures every kind of test may ask for: a database and Redis pair of its own
(:mod:`tests.support.services`), a cluster of cairn processes
(:mod:`tests.support.cluster`), the effects' test service and a cluster pointed at it
(:mod:`tests.support.shop`); and a failing test's cluster logs, printed."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import cluster
from tests.support.services import database_url, pg_template, redis_urls
from tests.support.shop import service, shop

__all__ = ["cluster", "database_url", "pg_template", "redis_urls", "service", "shop"]


@pytest.fixture(scope="session", autouse=True)
def preloaded_command_line() -> Iterator[Path]:
    """The ``cairn`` commands the tests run are handed to a preloaded command line, as a
    user's are (docs/cli.md#the-preloaded-command-line) — this session's own, in a
    runtime folder of its own, stopped when the session ends."""
    with tempfile.TemporaryDirectory(prefix="cairn-run-") as folder:
        os.environ["XDG_RUNTIME_DIR"] = folder
        yield Path(folder)
        for pid_file in Path(folder).glob("cairn/cli-*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError, OSError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
