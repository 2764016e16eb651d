"""Sentry: off without a DSN, and the local transport that keeps the envelopes the SDK
would send. Errors reaching it tagged with their run, workflow and node:
tests/embedded/test_sentry.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sentry_sdk

from cairn.observe.sentry import init_sentry
from tests.support.embedded import settings


class Captured(sentry_sdk.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Any) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(event)


def test_without_a_dsn_sentry_stays_off(tmp_path: Path) -> None:
    assert not init_sentry(settings(tmp_path))
    assert not sentry_sdk.get_client().is_active()
