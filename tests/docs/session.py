"""A page's blocks run as a reader runs them: one after the other in one shell session, in
a fresh virtualenv and a fresh environment, in a folder of their own.

The page becomes one bash script. Each shell block is cut into its top-level commands
(bash itself says where one ends), and the script checks the status of every one — not
only the last of a block, and not only what ``set -e`` would catch (it lets ``a && b``
fail quietly when ``a`` fails). A pipeline's status is its last command's, as in the
reader's terminal (no ``pipefail``: ``cairn status | grep -q`` must not fail when grep
stops reading early). A Python block is fed to the virtualenv's ``python -``,
in the shell's folder and environment as they are then. A background block is started
with ``&`` and the page goes on.

The whole script is a session of its own, in a process namespace of its own where the
machine allows one (:func:`own_processes`), its processes marked by a variable only they
carry; at the end every one of them is ended — including any that left the session —
and the page fails if one survives that.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tests.docs.blocks import Block

READY_TIMEOUT_S = 60
PROLOGUE = """\
__docs_at() { printf '%s\\n' "$1" > "$DOCS_TEST_STATUS"; }
__docs_check() {
  if [ "$1" -ne 0 ]; then
    printf '\\ndocs-test: exit status %s\\n' "$1" >&2
    exit "$1"
  fi
}
__docs_ready() {
  local deadline=$((SECONDS + $2))
  until bash -c "$1" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      printf '\\ndocs-test: not ready after %ss: %s\\n' "$2" "$1" >&2
      exit 124
    fi
    sleep 0.2
  done
}
"""


def commands(script: str) -> list[str]:
    """The top-level commands of a shell block, each as it is written (continuations,
    quotes and compound commands kept whole): a line is added to the command until bash
    finds the command complete."""
    found: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        current.append(line)
        chunk = "\n".join(current)
        if not chunk.strip() or chunk.rstrip().endswith("\\"):
            continue
        if complete(chunk):
            found.append(chunk)
            current = []
    if any(line.strip() for line in current):
        raise ValueError(f"not a complete shell command:\n{chunk}")
    return found


def complete(chunk: str) -> bool:
    """Whether bash reads ``chunk`` as whole commands. An open here-document is only a
    warning to ``bash -n``, so any word on stderr means not yet."""
    checked = subprocess.run(
        ["bash", "-n"], input=chunk, text=True, capture_output=True, check=False
    )
    return checked.returncode == 0 and not checked.stderr.strip()


@dataclass(frozen=True)
class Step:
    """One thing the script does, as the failure report names it."""

    block: Block
    command: str


def render(blocks: list[Block], folder: Path, python: Path) -> tuple[str, list[Step]]:
    """The page as one bash script, and the steps it checks, numbered as it reports."""
    lines = [PROLOGUE]
    steps: list[Step] = []
    for index, block in enumerate(blocks):
        lines.append(f"\nprintf '\\n=== %s (%s) ===\\n' {shlex.quote(block.where)} \"$(date +%T)\"")
        if block.marker.skip is not None:
            lines.append(f"printf 'skipped: %s\\n' {shlex.quote(block.marker.skip)}")
            continue
        source = folder / f"block-{index:02d}.{'py' if block.language == 'python' else 'sh'}"
        source.write_text(block.text, encoding="utf-8")
        if block.marker.background:
            runner = "bash" if block.language == "shell" else shlex.quote(str(python)) + " -"
            steps.append(Step(block, f"{runner} < {source.name} &"))
            lines += [f"__docs_at {len(steps) - 1}", f"{runner} < {shlex.quote(str(source))} &"]
            if block.marker.ready:
                steps.append(Step(block, f"(ready when) {block.marker.ready}"))
                ready = shlex.quote(block.marker.ready)
                lines += [f"__docs_at {len(steps) - 1}", f"__docs_ready {ready} {READY_TIMEOUT_S}"]
            continue
        if block.language == "python":
            parts = [f"{shlex.quote(str(python))} - < {shlex.quote(str(source))}"]
            shown = [block.text.strip()]
        else:
            parts = shown = commands(block.text)
        for command, text in zip(parts, shown, strict=True):
            steps.append(Step(block, text))
            lines += [f"__docs_at {len(steps) - 1}", command, "__docs_check $?"]
    return "\n".join(lines) + "\n", steps


def fresh_venv(where: Path) -> Path:
    """A virtualenv of its own (its ``pip``, its ``cairn`` once a page installs it) that
    also sees the packages of the one running the tests through a ``.pth`` line — so a
    page's ``pip install`` finds its dependencies installed and needs no download, while
    cairn itself is only there when the page (or the test, for a page that starts in an
    empty folder) installs it: a ``.pth`` line adds a folder, not the editable installs
    in it."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, capture_output=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "dev-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def fresh_env(venv: Path, home: Path, token: str) -> dict[str, str]:
    """What a reader's new terminal has: the virtualenv activated, a home and a temporary
    folder of the test's own, pip's machine settings (its index) — and nothing of cairn's,
    nor the tests' ``PYTHONPATH``."""
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key.startswith("PIP_")}
    env.update(
        {
            "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "VIRTUAL_ENV": str(venv),
            "HOME": str(home),
            "TMPDIR": str(home / "tmp"),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "DOCS_TEST_RUN": token,
        }
    )
    return env


def _as_is(value: str) -> Callable[[re.Match[str]], str]:
    """A replacement that is ``value`` itself (a path's backslash is no group reference)."""
    return lambda _match: value


def substitute(blocks: list[Block], replacements: Mapping[str, str]) -> list[Block]:
    """The blocks with the reader's local addresses (patterns) replaced by the test's own
    (its database, its Redis databases, a free port, its temporary folder) — in their
    text and in the command that says a background block is ready."""

    def swapped(text: str) -> str:
        for pattern, value in replacements.items():
            text = re.sub(pattern, _as_is(value), text)
        return text

    out = []
    for block in blocks:
        marker = block.marker
        if marker.ready is not None:
            marker = replace(marker, ready=swapped(marker.ready))
        out.append(Block(block.page, block.line, block.language, swapped(block.text), marker))
    return out


@dataclass
class Outcome:
    returncode: int
    failed: Step | None
    log: str
    survivors: list[int]


def run_page(
    blocks: list[Block], folder: Path, python: Path, env: dict[str, str], timeout_s: float
) -> Outcome:
    """Run the page's script in ``folder``; end everything it started; what happened."""
    scripts = folder.parent / "scripts"
    scripts.mkdir(exist_ok=True)
    script, steps = render(blocks, scripts, python)
    (scripts / "page.sh").write_text(script)
    status = scripts / "status"
    log = scripts / "page.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [*own_processes(), "bash", str(scripts / "page.sh")],
            cwd=folder,
            env={**env, "DOCS_TEST_STATUS": str(status)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        returncode = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        returncode = -1
    finally:
        survivors = end_all(process.pid, env["DOCS_TEST_RUN"])
    failed = None
    if returncode != 0 and status.exists():
        failed = steps[int(status.read_text().strip())]
    return Outcome(returncode, failed, log.read_text(errors="replace"), survivors)


@functools.cache
def own_processes() -> tuple[str, ...]:
    """The command that runs a page in a process namespace of its own, where one may be
    made: a page's ``pkill -f`` then finds only the page's processes, never those of a
    test running beside it (the tutorial kills ``cairn.dev.child worker``, which the
    tests of ``cairn dev`` run too), and whatever the page leaves ends with it. Root
    makes one directly, anyone else through a user namespace; where neither is
    allowed, the page runs without (its processes are still ended by its token)."""
    for prefix in (
        ("unshare", "--pid", "--fork", "--mount-proc", "--kill-child"),
        ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"),
    ):
        with contextlib.suppress(OSError):
            if subprocess.run([*prefix, "true"], capture_output=True, check=False).returncode == 0:
                return prefix
    return ()


def marked(token: str) -> Iterator[int]:
    """The processes whose environment carries the page's token."""
    needle = f"DOCS_TEST_RUN={token}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    yield int(entry.name)


def end_all(session: int, token: str) -> list[int]:
    """SIGTERM the page's process group and every marked process, SIGKILL what is left
    after a grace period; the pids still alive after that (there should be none)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(session, signal.SIGTERM)
    for pid in marked(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while list(alive(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(session, signal.SIGKILL)
    for pid in alive(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    return list(alive(token))


def alive(token: str) -> Iterator[int]:
    """Marked processes that are not zombies waiting for their parent to reap them."""
    for pid in marked(token):
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                yield pid


def new_token() -> str:
    return uuid.uuid4().hex
