"""Fixtures every kind of test may ask for: a database and Redis pair of its own
(:mod:`tests.support.services`), a cluster of cairn processes
(:mod:`tests.support.cluster`), the effects' test service and a cluster pointed at it
(:mod:`tests.support.shop`); and a failing test's cluster logs, printed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import cluster
from tests.support.services import database_url, pg_template, redis_urls
from tests.support.shop import service, shop

__all__ = ["cluster", "database_url", "pg_template", "redis_urls", "service", "shop"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
