"""Fixtures every kind of test may ask for: a database and Redis pair of its own
(:mod:`tests.support.services`), a cluster of cairn processes
(:mod:`tests.support.cluster`); and a failing test's cluster logs, printed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import cluster
from tests.support.services import database_url, pg_template, redis_urls

__all__ = ["cluster", "database_url", "pg_template", "redis_urls"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
