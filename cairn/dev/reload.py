"""Watching the project for changes to handler code and definitions (``watchfiles``).

A change is a reason to restart the worker: it imports the handlers afresh and registers
the definitions again (a changed YAML file becomes a new version for the next runs).
The scheduler and the API import no handler code, and keep running.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Final

from watchfiles import Change, DefaultFilter, watch

WATCHED_SUFFIXES: Final = (".py", ".yaml", ".yml", ".json")


class SourceFilter(DefaultFilter):
    """Python modules and definition files, outside ``ignored`` (the dev home: its
    database changes at every step) and outside what watchfiles ignores already
    (``__pycache__``, ``.git``, virtual environments, editors' swap files)."""

    def __init__(self, ignored: Sequence[Path]) -> None:
        super().__init__()
        self.ignored = tuple(path.resolve() for path in ignored)

    def __call__(self, change: Change, path: str) -> bool:
        if not path.endswith(WATCHED_SUFFIXES) or not super().__call__(change, path):
            return False
        resolved = Path(path).resolve()
        return not any(resolved.is_relative_to(folder) for folder in self.ignored)


class Stamps:
    """What each watched file was when last seen: its modification time and size.
    Reading a file can update its access time, which inotify reports as a change too;
    the first import after an edit would otherwise reload the worker a second time."""

    def __init__(self, folders: Sequence[Path], accept: SourceFilter) -> None:
        self._seen: dict[Path, tuple[int, int] | None] = {}
        for folder in folders:
            for parent, folders_in, files in os.walk(folder):
                # Not into what the filter ignores anyway: a virtualenv holds thousands.
                folders_in[:] = [name for name in folders_in if name not in accept.ignore_dirs]
                for name in files:
                    path = Path(parent, name)
                    if accept(Change.modified, str(path)):
                        self._seen[path] = _stamp(path)

    def changed(self, paths: Iterable[Path]) -> list[Path]:
        """Those of ``paths`` whose content may differ from when last seen."""
        found = []
        for path in sorted(set(paths)):
            stamp = _stamp(path)
            if path not in self._seen or self._seen[path] != stamp:
                found.append(path)
            self._seen[path] = stamp
        return found


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:  # deleted: a change, once
        return None
    return (stat.st_mtime_ns, stat.st_size)


def watch_sources(
    folders: Sequence[Path],
    ignored: Sequence[Path],
    on_change: Callable[[list[Path]], None],
    stop: threading.Event,
) -> threading.Thread:
    """Call ``on_change`` with the changed files (a burst of saves debounced into one
    call) on a thread of its own, until ``stop`` is set."""

    accept = SourceFilter(ignored)
    stamps = Stamps(folders, accept)

    def loop() -> None:
        for changes in watch(*folders, watch_filter=accept, stop_event=stop, raise_interrupt=False):
            changed = stamps.changed(Path(path) for _, path in changes)
            if changed:
                on_change(changed)

    thread = threading.Thread(target=loop, name="cairn-dev-reload", daemon=True)
    thread.start()
    return thread
