"""What a run's streaming model calls are saying, for a person following the run
(``cairn watch``): the run's chunk log (``Leases.read_chunks``), read on from where the
last read stopped, assembled into the text of each node's current call.

A node's current call is the newest one seen: a newer attempt replaces an older one's
text (the older was cut short: its chunks are superseded), a new call index starts the
text afresh, and chunks of an older attempt or call that arrive after are dropped. A
finished call (``done``) keeps its text until the node's next call replaces it; the
watcher shows it only while the node runs, and not at all once the run's state has moved
the node to a newer attempt than the text's.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cairn.lease.port import CHUNKS_KEPT, CHUNKS_PER_READ, Leases

# Characters of a call's text held: far more than a few rows of a terminal show, so a long
# answer costs the watcher no more memory than a short one.
TEXT_KEPT = 4000


@dataclass
class Said:
    """One node execution's current call: which, and its output's last characters."""

    attempt: int
    call: int
    text: str = ""  # the output's characters up to ``end``: its last TEXT_KEPT at most
    end: int = 0  # the offset in the call's output just after ``text``
    done: bool = False


class Streamed:
    """The chunk log of one run as read so far: where the next read starts (``after``)
    and the current call of each (node, iteration)."""

    def __init__(self) -> None:
        self.after = "0"
        self.calls: dict[tuple[str, int], Said] = {}

    def read(self, leases: Leases, run_id: str) -> None:
        """Add what was logged since the last read: one read, never waiting — more only
        while a read comes back full, which happens when the watch joins a run that has
        already said much (bounded by what the log keeps)."""
        for _ in range(CHUNKS_KEPT // CHUNKS_PER_READ + 1):
            chunks = leases.read_chunks(run_id, self.after)
            self.add(chunks)
            if len(chunks) < CHUNKS_PER_READ:
                return

    def add(self, chunks: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        for chunk_id, chunk in chunks:
            self.after = chunk_id
            self._add(chunk)

    def _add(self, chunk: Mapping[str, Any]) -> None:
        where = (str(chunk.get("node")), int(chunk.get("iteration", 1)))
        which = (int(chunk.get("attempt", 1)), int(chunk.get("call", 0)))
        said = self.calls.get(where)
        if said is not None and which < (said.attempt, said.call):
            return  # an attempt already superseded, or a call already followed by another
        if said is None or which != (said.attempt, said.call):
            said = self.calls[where] = Said(*which)
        offset, text = int(chunk.get("offset", 0)), str(chunk.get("text", ""))
        # Normally offset == end. Before it, the call is being said again from there (a
        # recovered execution making the same call): what followed is replaced. Past it,
        # chunks were missed (trimmed from the log, never published): none of it joins on.
        held = said.text[: max(0, len(said.text) - (said.end - offset))]
        if offset > said.end:
            held = ""
        said.text = (held + text)[-TEXT_KEPT:]
        said.end = offset + len(text)
        said.done = bool(chunk.get("done"))

    def prune(self, latest: Mapping[str, int]) -> None:
        """Forget the calls of iterations older than each node's latest (``latest``:
        node to iteration, from the run's state): they have ended, and a long loop would
        otherwise hold text for every visit."""
        for where in [w for w in self.calls if w[1] < latest.get(w[0], w[1])]:
            del self.calls[where]

    def shown(self, node: str, iteration: int, attempt: int, rows: int, width: int) -> list[str]:
        """The last ``rows`` rows, ``width`` wide, of what the current call of this
        execution says — none if its text is of an attempt older than ``attempt`` (the
        one the run's state says is running)."""
        said = self.calls.get((node, iteration))
        if said is None or said.attempt < attempt:
            return []
        return tail(said.text, rows, width)


def tail(text: str, rows: int, width: int) -> list[str]:
    """The last ``rows`` non-blank rows of ``text`` wrapped at ``width``."""
    lines = [line for line in text.split("\n") if line.strip()][-rows:]
    wrapped = [row for line in lines for row in textwrap.wrap(line, max(width, 1))]
    return wrapped[-rows:] if rows > 0 else []
