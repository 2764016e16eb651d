"""The preloaded command line: one process per user and installed cairn that has already
imported the command line, the HTTP client and the database layer, and forks a child for
each ``cairn`` command a shell runs (docs/cli.md#the-preloaded-command-line).

A command then costs the interpreter's start, a fork and its own work: importing the
libraries it uses (typer, rich, httpx, pydantic, SQLAlchemy, psycopg) is three quarters of
what it takes otherwise, more than its whole budget in direct mode. The child runs the
command as the shell's own process would: on the shell's terminal (its file descriptors
are handed over), in its folder, with its environment, umask and arguments; the shell's
process relays signals to it and exits with its code.

- :mod:`.place`: where a user's preloaded process listens, and which code it holds.
- :mod:`.handoff`: the ``cairn`` process's side: hand the command over, or start one.
- :mod:`.server`: the preloaded process: import, listen, fork.
- :mod:`.child`: one command in a forked child.

Only the standard library in :mod:`.place` and :mod:`.handoff`: they run before anything
else is imported.
"""
