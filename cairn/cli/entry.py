"""The ``cairn`` command: run in the user's preloaded command line when one listens
(:mod:`cairn.cli.preload`), else here — starting one for the commands that follow.

Only the standard library before the hand-over: a command that is handed over imports
nothing else in this process.
"""

from __future__ import annotations

import os
import sys

from cairn.cli.preload import handoff, place


def main() -> None:
    args = sys.argv[1:]
    path = place.socket_path(os.environ) if place.wanted(args, os.environ) else None
    if path is not None:
        code = handoff.run(path, args)
        if code is not None:
            sys.exit(code)
        handoff.start(path)
    from cairn.cli.main import main as run_here

    run_here()
