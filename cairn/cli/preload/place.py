"""Where a user's preloaded command line listens, and whether one may be used.

The socket lives in a folder only its owner may enter — ``$XDG_RUNTIME_DIR/cairn``, or
``<tmp>/cairn-<uid>`` — and its name carries a fingerprint of the code the process would
hold: the interpreter, the installed packages and every module of cairn. Upgrading a
library or editing cairn's own code (an editable install) names another socket, so a
command never runs on code older than what is installed; the old process, unused, ends
when it has been idle long enough.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping, Sequence
from typing import Final

try:  # the interpreter's own: hashlib would load OpenSSL, a tenth of this process's start
    from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import sha256

SWITCH_VARIABLE: Final = "CAIRN_CLI_PRELOAD"
IDLE_VARIABLE: Final = "CAIRN_CLI_PRELOAD_IDLE_S"
IDLE_S: Final = 900.0
OFF: Final = frozenset({"0", "off", "false", "no"})  # as a boolean setting is read
# Commands that are processes of their own — a fleet's worker, scheduler, API, the dev
# fleet, a container's liveness probe — run in the shell's process, never as a child of
# the preloaded one: their signals, their logs and their lifetime are their own.
OWN_PROCESS: Final = frozenset({"worker", "scheduler", "api", "dev", "probe"})
# A Unix socket's address holds 108 bytes on Linux, 104 on macOS, the NUL included.
MAX_SOCKET_PATH: Final = 100
# The root's options that take a value: the command is the first word after them.
ROOT_VALUE_OPTIONS: Final = frozenset({"--api-url"})


def wanted(args: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether this command line may run in the preloaded process."""
    if environ.get(SWITCH_VARIABLE, "").strip().lower() in OFF:
        return False
    if not hasattr(os, "fork") or sys.platform == "win32":
        return False
    return _command_word(args) not in OWN_PROCESS


def _command_word(args: Sequence[str]) -> str | None:
    words = iter(args)
    for word in words:
        if word in ROOT_VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def folder(environ: Mapping[str, str]) -> str | None:
    """This user's folder for the socket, made if missing; None when it is not safe: not
    a folder of this user's, or one others may enter."""
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    temporary = environ.get("TMPDIR") or "/tmp"
    path = (
        os.path.join(runtime, "cairn")
        if runtime
        else os.path.join(temporary, f"cairn-{os.getuid()}")
    )
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    private = stat.S_ISDIR(info.st_mode) and not info.st_mode & 0o077
    return path if private and info.st_uid == os.getuid() else None


def socket_path(environ: Mapping[str, str]) -> str | None:
    """The socket of the preloaded process for the code installed now; None when
    preloading cannot be used here."""
    home = folder(environ)
    if home is None:
        return None
    path = os.path.join(home, f"cli-{fingerprint()[:20]}.sock")
    return path if len(path.encode()) <= MAX_SOCKET_PATH else None


def fingerprint(package: str | None = None) -> str:
    """A digest of the code a preloaded process holds: the interpreter, the state of the
    installed packages (a folder that changes when one is added, removed or upgraded) and
    each of cairn's modules (name, size, modification time)."""
    root = package or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    digest = sha256(f"{sys.executable}\0{sys.version}\0{root}".encode())
    for place in sys.path:  # the installed packages' folders
        if place.endswith(("site-packages", "dist-packages")):
            digest.update(place.encode() + _stamp(place))
    for path in sorted(_modules(root)):
        digest.update(path.encode() + _stamp(path))
    return str(digest.hexdigest())


def _stamp(path: str) -> bytes:
    try:
        info = os.stat(path)
    except OSError:
        return b"\0missing"
    return f"\0{info.st_size}\0{info.st_mtime_ns}\0".encode()


def _modules(root: str) -> list[str]:
    found: list[str] = []
    folders = [root]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                    folders.append(entry.path)
                elif entry.name.endswith(".py"):
                    found.append(entry.path)
    return found
