"""The preloaded command line's process: import what commands use, listen, and fork a
child for each command (:mod:`cairn.cli.preload.child`).

It holds no connection, no thread and no state a command could see: only imported
modules. It ends when nothing has asked for ``CAIRN_CLI_PRELOAD_IDLE_S`` (900 s by
default), when its socket is removed or taken by another, or on SIGTERM. Beside the
socket, ``cli-<fingerprint>.pid`` holds its pid while it listens, and
``cli-<fingerprint>.log`` gets a line per command.

    python -m cairn.cli.preload.server SOCKET [LOCK_FD]

LOCK_FD, from the command that starts it, is a lock held until the socket listens: the
commands that come meanwhile run in their own processes and start no other.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import selectors
import signal
import socket
import sys
import time
from typing import Final

from cairn.cli.preload.place import IDLE_S, IDLE_VARIABLE

# What a quick command imports — the command line, its renderers, the HTTP client, the
# database layer and its drivers — and nothing that runs work: no worker, no Celery, none
# of the user's handlers.
PACKAGES: Final = (
    "cairn.cli", "cairn.http", "cairn.store", "cairn.engine", "cairn.decider",
    "cairn.definitions", "cairn.model", "cairn.config", "cairn.access", "cairn.dev.advert",
    "cairn.lease", "cairn.limits", "cairn.parts", "cairn.operations", "cairn.timetravel",
    "cairn.observe",
)  # fmt: skip
MODULES: Final = (
    "psycopg", "sqlalchemy.dialects.postgresql.psycopg", "sqlalchemy.dialects.sqlite",
    "alembic.migration", "redis", "sqlite3", "pwd", "yaml", "jsonschema", "rich.console",
    "rich.table", "rich.markup", "rich._emoji_codes", "typer._click.decorators",
    "typer._click._textwrap",
)  # fmt: skip
SKIPPED: Final = ("cairn.cli.preload", "cairn.store.migrations")
BACKLOG: Final = 64


def warm() -> int:
    """Import what commands use; how many modules are loaded."""
    for name in MODULES:
        _import(name)
    for name in PACKAGES:
        _import_tree(name)
    from cairn.cli.main import prebuild

    prebuild()  # every command's options built once, not in each child
    return len(sys.modules)


def _import_tree(name: str) -> None:
    package = _import(name)
    found = pkgutil.walk_packages(getattr(package, "__path__", []), f"{name}.", lambda _: None)
    for module in found:
        # A package's __main__ runs its command when imported.
        if not module.name.startswith(SKIPPED) and not module.name.endswith(".__main__"):
            _import(module.name)


def _import(name: str) -> object:
    """A module, or None when it does not import here (an optional dependency): a
    command that needs it imports it itself and says what is wrong."""
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def listen(path: str) -> socket.socket:
    """Bind ``path`` (readable and writable by this user only), replacing a socket left
    by a process that is gone: bound under a temporary name, then renamed."""
    draft = os.path.join(os.path.dirname(path), f".{os.getpid()}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        listener.bind(draft)
    finally:
        os.umask(old_umask)
    listener.listen(BACKLOG)
    os.replace(draft, path)
    return listener


class _Wake:
    """A pipe the kernel writes to on SIGCHLD (and any signal), so that one select waits
    for both a command to come and a command to end."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        for end in (self.read, self.write):
            os.set_blocking(end, False)
        signal.set_wakeup_fd(self.write)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.read, 512):
                pass

    def close_in_child(self) -> None:
        signal.set_wakeup_fd(-1)  # a command's signals are its own, not this loop's
        os.close(self.read)
        os.close(self.write)


def serve(path: str, idle_s: float, lock: int | None) -> None:
    listener = listen(path)
    pid_file = _write_pid(path)
    if lock is not None:
        os.close(lock)
    mine = os.stat(path).st_ino
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    wake = _Wake()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake.read, selectors.EVENT_READ)
    running: dict[int, socket.socket] = {}  # a command's child -> the caller waiting for it
    last = time.monotonic()
    try:
        while running or (time.monotonic() - last < idle_s and _still_mine(path, mine)):
            for key, _events in selector.select(timeout=min(idle_s, 5.0)):
                if key.fileobj is listener:
                    connection, _address = listener.accept()
                    last = time.monotonic()
                    running[_fork(connection, [listener, *running.values()], wake)] = connection
                else:
                    wake.drain()
            _report_ended(running)
    finally:
        if _still_mine(path, mine):  # else another took over; what is here is its
            stem = path.removesuffix(".sock")
            for leftover in (path, pid_file, f"{stem}.lock", f"{stem}.log"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)


def _fork(connection: socket.socket, others: list[socket.socket], wake: _Wake) -> int:
    """A child that runs the command ``connection`` hands over; its pid."""
    from cairn.cli.preload.child import run_command

    pid = os.fork()
    if pid == 0:
        wake.close_in_child()
        for other in others:
            other.close()
        run_command(connection)  # never returns
    return pid


def _report_ended(running: dict[int, socket.socket]) -> None:
    """Tell the caller of each command that ended how it ended: its exit code, or the
    signal that killed it (which the caller then dies of too)."""
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        caller = running.pop(pid, None)
        if caller is None:
            continue
        answer = (
            {"signal": os.WTERMSIG(status)}
            if os.WIFSIGNALED(status)
            else {"exit": os.waitstatus_to_exitcode(status)}
        )
        with contextlib.suppress(OSError):
            caller.sendall(json.dumps(answer).encode() + b"\n")
        caller.close()


def pid_file_of(path: str) -> str:
    """Where the process listening at ``path`` writes its pid (to stop it: SIGTERM)."""
    return path.removesuffix(".sock") + ".pid"


def _write_pid(path: str) -> str:
    pid_file = pid_file_of(path)
    draft = f"{pid_file}.{os.getpid()}"
    with os.fdopen(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        file.write(f"{os.getpid()}\n")
    os.replace(draft, pid_file)
    return pid_file


def _still_mine(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def main() -> None:
    path, lock = sys.argv[1], (int(sys.argv[2]) if len(sys.argv) > 2 else None)
    started = time.monotonic()
    loaded = warm()
    idle_s = float(os.environ.get(IDLE_VARIABLE) or IDLE_S)
    print(
        f"cairn cli preload: pid {os.getpid()}, {loaded} modules in "
        f"{time.monotonic() - started:.2f} s, listening on {path}, idle limit {idle_s:g} s",
        flush=True,
    )
    serve(path, idle_s, lock)


if __name__ == "__main__":
    main()
