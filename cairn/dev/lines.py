"""The one log of ``cairn dev``: each child's lines, tagged with the process that wrote
them and, for a line of a step, the run (short) and the node.

Children write JSON (:mod:`cairn.observe.logs`); a line that is not JSON — a handler's
``print``, a crash's traceback on stderr — is shown as it is, under its process. With
``CAIRN_LOG_FORMAT=json`` the log stays JSON, every object naming its process.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from datetime import datetime
from typing import Any, Final, TextIO

SHORT_RUN: Final = 8  # as git shortens a commit: enough to tell a developer's runs apart
TAG_WIDTH: Final = 9
CONTINUED: Final = len("12:00:01 ") + TAG_WIDTH + 1
# uvicorn's start and stop lines at INFO say what the supervisor's own lines say better.
QUIET_LOGGERS: Final = ("uvicorn.error", "uvicorn")
COLOURS: Final = {"worker": "36", "scheduler": "35", "api": "32", "dev": "1"}
LEVEL_COLOURS: Final = {"WARNING": "33", "ERROR": "31", "CRITICAL": "31"}


class Log:
    """Writes rendered lines to ``stream``, one at a time (children are read on threads)."""

    def __init__(self, stream: TextIO | None = None, *, json_lines: bool = False) -> None:
        self.stream = stream or sys.stdout
        self.json_lines = json_lines
        self.colour = self.stream.isatty() and "NO_COLOR" not in os.environ  # no-color.org
        self._lock = threading.Lock()

    def child(self, process: str, raw: str) -> None:
        """A line a child wrote."""
        line = render(process, raw.rstrip("\n"), json_lines=self.json_lines, colour=self.colour)
        if line is not None:
            self._write(line)

    def say(self, message: str, *, level: str = "INFO") -> None:
        """A line of the supervisor's own."""
        entry = {"time": _now(), "level": level, "logger": "cairn.dev", "message": message}
        if self.json_lines:
            self._write(json.dumps({**entry, "process": "dev"}))
        else:
            self._write(_text("dev", entry, colour=self.colour))

    def _write(self, line: str) -> None:
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def render(process: str, raw: str, *, json_lines: bool, colour: bool = False) -> str | None:
    """The line to show for ``raw`` from child ``process``; None to leave it out."""
    entry = _parsed(raw)
    if entry is None:
        if json_lines:
            return json.dumps({"time": _now(), "process": process, "message": raw})
        return f"{_clock(None)} {_tag(process, colour)} {raw}"
    tag = str(entry.pop("dev_process", process))
    if entry.get("logger") in QUIET_LOGGERS and entry.get("level") == "INFO":
        return None
    if json_lines:
        return json.dumps({**entry, "process": tag}, ensure_ascii=False)
    return _text(tag, entry, colour=colour)


def _parsed(raw: str) -> dict[str, Any] | None:
    if not raw.startswith("{"):
        return None
    try:
        entry = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return entry if isinstance(entry, dict) and "message" in entry else None


def _text(process: str, entry: dict[str, Any], *, colour: bool) -> str:
    """``12:00:01 worker    3f2a1b9c draft#1  message``: time, process, the step (if the
    line is a step's), the level (if not INFO), the message, then any traceback."""
    parts = [_clock(entry.get("time")), _tag(process, colour)]
    run_id = entry.get("run_id")
    if run_id:
        parts.append(f"{str(run_id)[:SHORT_RUN]} {entry.get('node')}#{entry.get('attempt')}")
    level = str(entry.get("level", "INFO"))
    if level != "INFO":
        code = LEVEL_COLOURS.get(level)
        parts.append(f"\x1b[{code}m{level}\x1b[0m" if colour and code else level)
    parts.append(str(entry.get("message", "")))
    trace = entry.get("exc_info") or entry.get("stack_info")
    text = " ".join(parts) + (f"\n{trace}" if trace else "")
    # A message's further lines and a traceback's, under the first line's message.
    return text.replace("\n", "\n" + " " * CONTINUED)


def _tag(process: str, colour: bool) -> str:
    padded = process.ljust(TAG_WIDTH)
    code = COLOURS.get(process)
    return f"\x1b[{code}m{padded}\x1b[0m" if colour and code else padded


def _clock(time: object) -> str:
    """The local wall-clock time of an ISO 8601 timestamp (None: now), to the second."""
    try:
        moment = datetime.now() if time is None else datetime.fromisoformat(str(time))
    except ValueError:
        moment = datetime.now()
    return moment.astimezone().strftime("%H:%M:%S")


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")
