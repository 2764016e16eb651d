"""One command in a child forked by the preloaded process: it becomes the shell's
command — the shell's terminal, folder, environment, umask, import path and arguments —
runs :func:`cairn.cli.main.main`, and exits with its code (which the preloaded process,
its parent, passes on).

Only a process of the same user may hand a command over (the socket's folder is private,
and the peer's uid is checked again here).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from typing import Any, Final

HEADER: Final = 4
MAX_FRAME: Final = 16 * 1024 * 1024
INTERRUPTED: Final = 130


def run_command(connection: socket.socket) -> None:
    """Run the command ``connection`` hands over, answer its exit code, and end this
    process — never return into the preloaded process's loop, whatever happens. The
    preloaded process tells the caller how it ended."""
    _default_signals()
    code, command, started = 1, "?", time.monotonic()
    log = os.dup(2)  # the preloaded process's log, before the command's stderr replaces it
    try:
        _same_user(connection)
        request = _receive(connection)
        command = next((word for word in request["args"] if not word.startswith("-")), "")
        connection.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        if connection.recv(3, socket.MSG_WAITALL) != b"go\n":
            raise EOFError("the command line went away before it said go")
        _hang_up_with(connection)
        code = _run(request)
        _log(log, f"cairn {command}: exit {code} in {time.monotonic() - started:.3f} s")
    except KeyboardInterrupt:  # relayed once told go, before the command itself began
        code = INTERRUPTED
        _log(log, f"cairn {command}: interrupted as it began")
    except BaseException:  # the log says why; the command line says it was lost
        _log(log, f"cairn {command}: lost\n{traceback.format_exc()}")
    finally:
        os._exit(code)


def _default_signals() -> None:
    """A command's signals as a process of its own has them, not the preloaded one's."""
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _log(log: int, line: str) -> None:
    os.write(log, f"pid {os.getpid()}: {line}\n".encode())


def _hang_up_with(connection: socket.socket) -> None:
    """End this command as a terminal's hang-up would when the command line that waits
    for it goes away (killed, or its terminal closed)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            connection.recv(1)
        os.kill(os.getpid(), signal.SIGHUP)

    threading.Thread(target=watch, name="cairn-preload-caller", daemon=True).start()


def _same_user(connection: socket.socket) -> None:
    if hasattr(socket, "SO_PEERCRED"):
        credentials = connection.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
        )
        _pid, uid, _gid = struct.unpack("3i", credentials)
        if uid != os.getuid():
            raise PermissionError(f"a command from uid {uid} refused")


def _receive(connection: socket.socket) -> dict[str, Any]:
    first, descriptors, _flags, _address = socket.recv_fds(connection, 65536, 3)
    if len(descriptors) != 3 or len(first) < HEADER:
        raise ValueError("a command without its terminal")
    size = int.from_bytes(first[:HEADER], "big")
    if size > MAX_FRAME:
        raise ValueError(f"a command of {size} bytes")
    body = bytearray(first[HEADER:])
    while len(body) < size:
        chunk = connection.recv(size - len(body))
        if not chunk:
            raise EOFError("the command line went away")
        body += chunk
    for target, descriptor in enumerate(descriptors):
        os.dup2(descriptor, target)
        os.close(descriptor)
    request: dict[str, Any] = json.loads(body)
    return request


def _run(request: dict[str, Any]) -> int:
    _become(request)
    code: int
    try:
        from cairn.cli.main import main

        main()
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        code = INTERRUPTED
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish_as_the_interpreter_would()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 1
    return code


def _finish_as_the_interpreter_would() -> None:
    """Wait for the command's own threads, then run its exit functions."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _become(request: dict[str, Any]) -> None:
    """This process becomes the shell's command."""
    environ: dict[str, str] = request["env"]
    preloaded = os.environ.get("PYTHONPATH", "")
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update(environ)
    sys.argv = [request["argv0"], *request["args"]]
    # click names the program in usage lines after __main__'s package: the command's, not
    # the preloaded process's.
    sys.modules["__main__"].__package__ = request["package"]
    sys.path[:] = _import_path(environ.get("PYTHONPATH", ""), preloaded)
    _standard_streams(environ)


def _import_path(python_path: str, preloaded: str) -> list[str]:
    """The interpreter's path as the command's own process would have it: its
    PYTHONPATH first, then the installation's — not the preloaded process's own folder
    (the first entry) nor its PYTHONPATH."""
    theirs = set(_entries(preloaded))
    inherited = [entry for entry in sys.path[1:] if entry not in theirs]
    return [*_entries(python_path), *inherited]


def _entries(python_path: str) -> list[str]:
    return [entry for entry in python_path.split(os.pathsep) if entry]


def _standard_streams(environ: dict[str, str]) -> None:
    """Streams on the handed-over descriptors, buffered as the interpreter would: a line
    at a time on a terminal, unbuffered when PYTHONUNBUFFERED asks."""
    unbuffered = bool(environ.get("PYTHONUNBUFFERED"))
    encoding, _, errors = environ.get("PYTHONIOENCODING", "").partition(":")
    streams: list[io.TextIOWrapper] = []
    for descriptor, mode in ((0, "r"), (1, "w"), (2, "w")):
        terminal = os.isatty(descriptor)
        streams.append(
            io.TextIOWrapper(
                open(descriptor, f"{mode}b", closefd=False),  # noqa: SIM115 - the process's own
                encoding=encoding or "utf-8",
                errors=errors or ("backslashreplace" if descriptor == 2 else "strict"),
                line_buffering=terminal or descriptor == 2,
                write_through=unbuffered,
            )
        )
    sys.stdin, sys.stdout, sys.stderr = streams
