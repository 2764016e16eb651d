"""Every shell and Python block of the pages a newcomer follows runs, as written, against
real PostgreSQL and Redis: the README's quick start and "Running it" in a fresh copy of
the checkout (as after ``git clone``), the tutorial (once there is one) in an empty
folder with this checkout's cairn installed. A block that fails fails the test, naming
the page, the line and the command.

The text is run as it stands, except for the reader's local addresses, which become the
test's own: its own database, its own pair of Redis databases, a free port for the model
stand-in, its own temporary folder for ``/tmp/``. How a page marks a block not to run,
or to run in the background, is in :mod:`tests.docs.blocks`; how a page runs, in
:mod:`tests.docs.session`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.blocks import read_blocks
from tests.docs.session import fresh_env, fresh_venv, new_token, run_page, substitute
from tests.support.services import ROOT, admin, db_url, drop

# page -> where its reader starts: a clone of the repository, or an empty folder
PAGES = {"README.md": "clone", "docs/tutorial.md": "empty"}
PAGE_TIMEOUT_S = 540


def checkout_copy(into: Path) -> Path:
    """The files of this checkout that a fresh clone would have — as they are in the
    working tree, so that the text under test is the text being edited."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def blank_database_url() -> Iterator[str]:
    """A database of the test's own with nothing in it: the page migrates it."""
    name = f"cairn_docs_{uuid.uuid4().hex[:12]}"
    with admin() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield db_url(name)
    drop(name)


@pytest.mark.timeout(PAGE_TIMEOUT_S + 60)
@pytest.mark.parametrize("page", [page for page in PAGES if (ROOT / page).exists()])
def test_the_page_runs_as_written(
    page: str, blank_database_url: str, redis_urls: tuple[str, str], tmp_path: Path
) -> None:
    broker, leases = redis_urls
    home = tmp_path / "home"
    blocks = substitute(
        read_blocks(ROOT / page, page),
        {
            r"postgresql://postgres@127\.0\.0\.1(?::5432)?/cairn\b": blank_database_url,
            r"redis://127\.0\.0\.1:6379/0\b": broker,
            r"redis://127\.0\.0\.1:6379/1\b": leases,
            r"\b8765\b": str(free_port()),
            r"\b8000\b": str(free_port()),  # the API of the tutorial's `cairn dev`
            r"(?<![\w./-])/tmp/": f"{home}/tmp/",
        },
    )
    assert any(block.marker.skip is None for block in blocks), f"{page} has no block to run"
    clone = checkout_copy(tmp_path / "cairn")
    python = fresh_venv(tmp_path / "venv")
    env = fresh_env(tmp_path / "venv", home, new_token())
    folder = clone
    if PAGES[page] == "empty":
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "-e", str(clone)],
            env=env,
            check=True,
        )
        folder = tmp_path / "work"
        folder.mkdir()

    outcome = run_page(blocks, folder, python, env, PAGE_TIMEOUT_S)

    failed = outcome.failed
    where = f"{failed.block.where}: {failed.command}" if failed else page
    status = "timed out" if outcome.returncode == -1 else f"exit status {outcome.returncode}"
    assert outcome.returncode == 0, (
        f"{where}\n{status}; the page's output, last lines:\n"
        + "\n".join(outcome.log.splitlines()[-60:])
    )
    assert outcome.survivors == [], f"processes the page started outlived it: {outcome.survivors}"
