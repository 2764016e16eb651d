"""The ``cairn`` process's side of the preloaded command line: hand the command to the
preloaded process, relay signals to the child that runs it and take its exit code; or,
with none listening, start one for the next command.

The wire, on a Unix socket: the command sends one frame (a 4-byte length and a JSON body:
arguments, environment, folder, umask) with its stdin, stdout and stderr attached
(SCM_RIGHTS); the child answers ``{"pid": N}`` when it starts, the command says ``go``,
and when the child has ended the preloaded process answers ``{"exit": CODE}`` or
``{"signal": N}`` — one JSON object a line. The command keeps the connection open while
it waits: if it closes, the child ends as on a hang-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import BinaryIO, Final

from cairn.cli.preload.place import IDLE_VARIABLE

# Relayed to the child: what a terminal sends a foreground command, and what a process
# manager sends to stop one.
RELAYED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH)
# For the child to say it started: the preloaded process only accepts and forks.
ANSWER_S: Final = 10.0
LOST: Final = 1  # the child ended without a word: killed, or the process went away
STDIO: Final = (0, 1, 2)
# What the preloaded process keeps of the environment it is started from: what finds and
# runs the interpreter and its packages (and PYTHON*, LC_*), and its own idle limit.
INTERPRETER_VARIABLES: Final = frozenset(
    {"PATH", "HOME", "LANG", "TMPDIR", "XDG_RUNTIME_DIR", "VIRTUAL_ENV", IDLE_VARIABLE}
)


def request(args: Sequence[str], environ: Mapping[str, str]) -> bytes:
    """The frame that hands a command over."""
    umask = os.umask(0)
    os.umask(umask)
    body = json.dumps(
        {
            "argv0": sys.argv[0],
            "package": getattr(sys.modules.get("__main__"), "__package__", None),
            "args": list(args),
            "env": dict(environ),
            "cwd": os.getcwd(),
            "umask": umask,
        }
    ).encode()
    return len(body).to_bytes(4, "big") + body


def run(path: str, args: Sequence[str]) -> int | None:
    """Run the command in the preloaded process listening at ``path``: its exit code, or
    None when none answers there — and then nothing ran, for a child runs the command
    only once told ``go`` (the command then runs in this process).

    Signals are the command's from the start: one that comes before the child is known
    is kept, and relayed once it has been told ``go`` — or, when none answers, raised
    here again as if it came now, with this process's own handlers (an interrupt ends
    it before the command would run here)."""
    relay = _Relay()
    previous = {signum: signal.signal(signum, relay) for signum in RELAYED}
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(ANSWER_S)
    try:
        connection.connect(path)
        frame = request(args, os.environ)
        sent = socket.send_fds(connection, [frame], list(STDIO))
        connection.sendall(frame[sent:])
        answers = connection.makefile("rb")
        child = int(json.loads(answers.readline())["pid"])
        connection.sendall(b"go\n")
    except (OSError, ValueError, KeyError, TypeError):
        connection.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for kept in relay.pending:
            signal.raise_signal(kept)
        return None
    relay.to(child)
    connection.settimeout(None)
    with connection:
        return _follow(answers)


class _Relay:
    """Signals for the child that runs the command: kept until it is known."""

    def __init__(self) -> None:
        self.child: int | None = None
        self.pending: list[int] = []

    def __call__(self, signum: int, _frame: object) -> None:
        if self.child is None:
            self.pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.child, signum)

    def to(self, child: int) -> None:
        self.child = child
        while self.pending:
            self(self.pending.pop(0), None)


def _follow(answers: BinaryIO) -> int:
    for line in answers:
        answer = json.loads(line)
        if "signal" in answer:  # the command was killed: so is its caller, as a shell sees
            _die_of(int(answer["signal"]))
        if "exit" in answer:
            return int(answer["exit"])
    sys.stderr.write(
        "error: the command ended without an exit code [preload_lost] — it was killed, "
        "or the preloaded command line stopped; run it again (CAIRN_CLI_PRELOAD=0 runs "
        "commands without it)\n"
    )
    return LOST


def _die_of(signum: int) -> None:
    with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    sys.exit(128 + signum)  # a signal whose default is not to end a process


def start(path: str) -> None:
    """Start the preloaded process for ``path`` in the background, detached from this
    terminal, unless one is starting already: it holds ``<path>.lock`` until it listens."""
    import fcntl
    import subprocess

    stem = path.removesuffix(".sock")
    lock = os.open(f"{stem}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    log = os.open(f"{stem}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        subprocess.Popen(
            [sys.executable, "-m", "cairn.cli.preload.server", path, str(lock)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            pass_fds=(lock,),
            start_new_session=True,
            # Where cairn is importable from, not this command's folder, and only what
            # the interpreter needs of its environment: each command brings its own
            # (cairn.cli.preload.child), and no secret stays in the process.
            cwd=_package_parent(),
            env=interpreter_env(os.environ),
        )
    except OSError:
        pass  # one is starting; or none can: the command runs here all the same
    finally:
        os.close(log)
        os.close(lock)


def interpreter_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What the preloaded process is started with of ``environ``."""
    return {
        key: value
        for key, value in environ.items()
        if key in INTERPRETER_VARIABLES or key.startswith(("PYTHON", "LC_"))
    }


def _package_parent() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
