"""The image's HEALTHCHECK: check whichever cairn process the container runs.

One image runs every process, so the check reads PID 1's command line and picks:

- ``cairn worker``: ``cairn probe worker`` (the worker consumed its own ping through the
  broker recently; see docs/operations.md);
- ``cairn api``: ``GET /healthz`` on its ``--port`` (default 8000);
- Flower (``celery ... flower``): ``GET /healthcheck`` on its ``--port`` (default 5555);
- anything else (scheduler, reconcile, db upgrade): PID 1 is alive, which it is if this
  runs at all. The scheduler has no probe of its own yet.

Exit 0 healthy, 1 not: Docker's contract. Standard library only.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path


def command_line(pid: int = 1) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def option(argv: Sequence[str], name: str, default: str) -> str:
    """The value of ``--name=V`` or ``--name V`` in argv, else the default."""
    for index, arg in enumerate(argv):
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
    return default


def check_for(argv: Sequence[str]) -> list[str] | str | None:
    """What to check for a process started with argv: a command to run (list), a local
    URL to GET (str), or None (nothing beyond being alive)."""
    words = set(argv)
    if "flower" in words:
        return f"http://127.0.0.1:{option(argv, '--port', '5555')}/healthcheck"
    if "api" in words:
        return f"http://127.0.0.1:{option(argv, '--port', '8000')}/healthz"
    if "worker" in words:
        return ["cairn", "probe", "worker"]
    return None


def main() -> int:
    check = check_for(command_line())
    if isinstance(check, list):
        return subprocess.call(check)
    if isinstance(check, str):
        try:
            with urllib.request.urlopen(check, timeout=5) as response:
                return 0 if response.status == 200 else 1
        except OSError as error:
            print(f"unhealthy: {check}: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
