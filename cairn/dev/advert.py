"""Where a running ``cairn dev`` listens, for the command line in the same project.

While it runs, ``cairn dev`` keeps ``<home>/dev.json`` (readable by its owner only): its
API's address, its pid, and digests of the database settings its children use. A command
run in that project — in its folder or below, with no ``CAIRN_API_URL`` set and no other
database asked for — talks to that API with the development key instead of opening the
database itself (:mod:`cairn.cli.remote`): it answers as fast as remote mode does, and
sees what only the running fleet knows (on the embedded default, the leases and
heartbeats live in the dev process's memory). The file goes when ``cairn dev`` stops; one
left by a ``cairn dev`` that was killed names a process that is gone and is ignored.

Only the standard library: every command line reads this before it decides anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ADVERT_FILE: Final = "dev.json"
HOME_DIR: Final = ".cairn"  # the project's, as cairn.dev.plan.DEV_HOME
KEY_FILE: Final = "dev-api-key"
# The settings that choose the database: a command that sets one of them otherwise than
# the dev fleet did means another database, and is left to it.
DATABASE_VARIABLES: Final = ("CAIRN_DATABASE_URL", "CAIRN_HOME")


@dataclass(frozen=True)
class Advert:
    url: str
    key: str
    pid: int
    home: Path
    settings: dict[str, str]  # variable -> digest of its value as the fleet had it ("": unset)


def digest(value: str | None) -> str:
    """A setting as the advert keeps it: never the value itself (a database URL may hold
    a password)."""
    return "" if not value else hashlib.sha256(value.encode()).hexdigest()


def publish(home: Path, url: str, key: str, environ: Mapping[str, str]) -> Path:
    """Write the advert of this process's fleet (atomically: a reader never sees half)."""
    path = home / ADVERT_FILE
    body = {
        "url": url,
        "pid": os.getpid(),
        "settings": {name: digest(environ.get(name)) for name in DATABASE_VARIABLES},
    }
    draft = path.with_suffix(f".{os.getpid()}.tmp")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(body, file)
    os.replace(draft, path)
    return path


def withdraw(home: Path) -> None:
    """Remove the advert, if it is this process's."""
    advert = _read(home / ADVERT_FILE)
    if advert is not None and advert.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            (home / ADVERT_FILE).unlink()


def found(cwd: Path, environ: Mapping[str, str]) -> Advert | None:
    """The live ``cairn dev`` of the project ``cwd`` is in, when a command there would
    reach the same database as it; None otherwise."""
    homes = (
        [Path(environ["CAIRN_HOME"])]
        if environ.get("CAIRN_HOME")
        else [folder / HOME_DIR for folder in (cwd, *cwd.parents)]
    )
    for home in homes:
        advert = _read(home / ADVERT_FILE)
        if advert is not None and _alive(advert.pid):
            return advert if _same_database(advert, environ) else None
    return None


def _same_database(advert: Advert, environ: Mapping[str, str]) -> bool:
    for name in DATABASE_VARIABLES:
        value = environ.get(name)
        if name == "CAIRN_HOME" and value:
            value = str(Path(value).resolve())
            if Path(value) == advert.home.resolve():
                continue
        if value and digest(value) != advert.settings.get(name, ""):
            return False
    return True


def _read(path: Path) -> Advert | None:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        key = (path.parent / KEY_FILE).read_text(encoding="utf-8").strip()
        return Advert(str(body["url"]), key, int(body["pid"]), path.parent, dict(body["settings"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: not this user's fleet
        return False
    return True
