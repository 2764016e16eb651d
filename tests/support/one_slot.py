"""A workflow whose one node holds a pool of one slot until the test lets it go, on the
embedded runtime: the second run's node waits for the slot, parked."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from cairn.config import Settings
from cairn.runtime import Runtime

WORKFLOW = "one_slot"
release = threading.Event()


def hold_slot(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    release.wait(30)
    return {}


def one_slot_runtime(tmp_path: Path) -> Runtime:
    """The runtime (workers not started yet), its holder not let go."""
    (tmp_path / "one.yaml").write_text(
        f"""
name: {WORKFLOW}
version: 1
start: hold
nodes:
  hold: {{handler: "{__name__}:hold_slot", next: done,
          concurrency: {{key: the-one, limit: 1}}}}
  done: {{end: succeeded}}
"""
    )
    settings = Settings(
        home=tmp_path / "home",
        workflows=[str(tmp_path / "one.yaml")],
        lease_ttl=3.0,
        heartbeat_interval=1.0,
    )
    release.clear()
    return Runtime.build(settings, concurrency=4)
