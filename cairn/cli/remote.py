"""Which way a command reaches cairn — one rule — and what remote mode needs.

**The rule.** With ``CAIRN_API_URL`` set (or ``cairn --api-url URL ...``), every operator
command talks to the HTTP API, with the key in ``CAIRN_API_KEY``: it acts as that key's
principal, in that key's namespace, and needs no database credentials. Without it, in a
project where ``cairn dev`` runs (:mod:`cairn.dev.advert`: its folder or below, no other
database asked for), a command talks to that fleet's API with its development key.
Otherwise a command opens the database (``CAIRN_DATABASE_URL``, or the embedded default)
and acts as ``db:<user>``. A database URL set beside ``CAIRN_API_URL`` is not used by
operator commands. A command with no remote form says so and stops (exit 2) instead of
reaching for the database behind the user's back when ``CAIRN_API_URL`` asked for the
API; beside a ``cairn dev`` it opens the database, as it would without one. The processes
(worker, scheduler, api, db upgrade) use the database whatever this says, and say so once
when ``CAIRN_API_URL`` is set.

Only the standard library is imported here: the HTTP client (httpx, pydantic) is
imported when a command opens it, so direct mode never loads it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from cairn.errors import CairnError, InvalidInput

if TYPE_CHECKING:
    from cairn.dev.advert import Advert
    from cairn.http import Client

URL_VARIABLE = "CAIRN_API_URL"
KEY_VARIABLE = "CAIRN_API_KEY"
# Replays and dry runs execute handlers in the API process: give them time.
TIMEOUT_S = 120.0
# A person is waiting: two tries, not the library's five with backoff.
ATTEMPTS = 2
DEFAULT_NAMESPACE = "default"


class NoRemoteForm(CairnError):
    """A command (or one of its options) that needs the database, asked in remote mode."""

    code = "no_remote_form"


def explicit() -> bool:
    """``CAIRN_API_URL`` is set (and not empty): remote mode, asked for."""
    return bool(os.environ.get(URL_VARIABLE, "").strip())


def active() -> bool:
    """Remote mode: asked for, or the ``cairn dev`` of this project answers."""
    return explicit() or _dev_fleet() is not None


def use_url(url: str) -> None:
    """``--api-url``: remote mode for this process, as if ``CAIRN_API_URL`` were set."""
    os.environ[URL_VARIABLE] = url


class _DevLookup:
    """This command's ``cairn dev``, looked up once (:func:`forget` at each command)."""

    looked = False
    fleet: Advert | None = None


def forget() -> None:
    """A new command begins (the CLI's callback): look again."""
    _DevLookup.looked, _DevLookup.fleet = False, None


def _dev_fleet() -> Advert | None:
    if not _DevLookup.looked:
        from cairn.dev.advert import found

        try:
            _DevLookup.fleet = found(Path.cwd(), os.environ)
        except OSError:  # the working directory is gone: no project to look in
            _DevLookup.fleet = None
        _DevLookup.looked = True
    return _DevLookup.fleet


def _without_dev_fleet() -> None:
    """This command opens the database itself, though a ``cairn dev`` runs here."""
    _DevLookup.looked, _DevLookup.fleet = True, None


# Modules the HTTP stack imports only to probe for them: httpcore looks for trio (which a
# test or tool may have installed), httpx for its own command line's rich and click,
# tenacity for tornado — a third of a remote command's start, for nothing the CLI's
# blocking client uses.
UNUSED_PROBES = ("trio", "httpx._main", "tornado")


@contextmanager
def api() -> Iterator[Client]:
    """The API client of one command, closed after it."""
    with _not_probing(UNUSED_PROBES):
        from cairn.http import Client, RetryPolicy

        fleet = None if explicit() else _dev_fleet()
        client = Client(
            fleet.url if fleet else None,
            fleet.key if fleet else None,
            timeout_s=TIMEOUT_S,
            retry=RetryPolicy(attempts=ATTEMPTS),
        )
    with client:
        yield client


@contextmanager
def _not_probing(modules: tuple[str, ...]) -> Iterator[None]:
    """While open, importing one of ``modules`` that is not loaded yet raises ImportError
    (a ``None`` in ``sys.modules``, as Python documents); afterwards they import again."""
    blocked = [name for name in modules if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in blocked:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


def direct_only(command: str, why: str) -> None:
    """Stop with a clear line if remote mode was asked for: ``command`` needs the
    database. Beside a ``cairn dev``, the command opens the database as before."""
    _without_dev_fleet()
    if explicit():
        raise NoRemoteForm(
            f"cairn {command} has no remote form ({why}); unset {URL_VARIABLE} to run it "
            "against the database directly"
        )


def process_note(command: str) -> None:
    """A process (worker, scheduler, api, db upgrade) runs on the database whatever the
    mode: say so once when remote mode is asked for, so that nobody believes it went
    remote."""
    _without_dev_fleet()
    if explicit():
        sys.stderr.write(
            f"note: {URL_VARIABLE} is set, but cairn {command} has no remote form: it uses "
            "the database (CAIRN_DATABASE_URL) all the same\n"
        )


def key_namespace(namespace: str | None, option: str = "--namespace") -> None:
    """Remote mode acts in the API key's namespace: an explicit other one is refused
    rather than silently ignored."""
    if active() and namespace not in (None, DEFAULT_NAMESPACE):
        raise InvalidInput(
            f"{option}: in remote mode a command acts in its API key's namespace; leave "
            f"{option} out (or use a key of namespace {namespace!r})"
        )


def error_line(exc: CairnError) -> str:
    """``error: what is wrong, and why [code] — what to do``: the one shape of every
    refusal the command line prints, in either mode (remote mode adds the HTTP status)."""
    status, code = getattr(exc, "status", None), exc.code
    fleet = None if explicit() else _dev_fleet()
    if code == "unreachable" and fleet is not None:
        hint: str | None = (
            f"the cairn dev of {fleet.home.parent} ({fleet.url}) does not answer: is it "
            "still starting?"
        )
    elif code == "unreachable":
        hint = f"is {URL_VARIABLE} ({os.environ.get(URL_VARIABLE, '')}) right, and the API up?"
    elif status == 401:
        hint = f"check {KEY_VARIABLE}"
    elif status == 403:
        hint = "ask an admin for a key whose role may (docs/access.md#roles)"
    else:
        hint = exc.hint
    tag = f"HTTP {status} {code}" if status is not None else code
    first, _, details = str(exc).partition("\n")  # a definition's faults, one a line
    line = f"error: {first.rstrip(':')} [{tag}]" + (f" — {hint}" if hint else "")
    return f"{line}\n{details}" if details else line
