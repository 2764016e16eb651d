"""Backends for the contract suites: each port's every implementation. A backend whose
service is not running is skipped on a laptop; in CI (``CAIRN_TEST_REQUIRE_SERVICES=1``,
set by ``.ci/run``) it fails, so that a contract never silently stops running."""

from __future__ import annotations

import os

import pytest

pytest.register_assert_rewrite(
    "cairn.testing.contracts", "cairn.testing.store_contract", "cairn.testing.publisher_contract"
)

REQUIRED = os.environ.get("CAIRN_TEST_REQUIRE_SERVICES") == "1"


def unavailable(what: str, error: Exception) -> None:
    if REQUIRED:
        raise RuntimeError(f"{what} is needed by the contract suite: {error}") from error
    pytest.skip(f"{what} is not running: {error}")
