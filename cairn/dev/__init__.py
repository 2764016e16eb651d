"""``cairn dev``: a whole fleet for development in one terminal.

The supervisor (:mod:`cairn.dev.supervisor`) runs a worker, a scheduler and the API (with
the console) as child processes of its own (:mod:`cairn.dev.child`), prints their lines
as one log tagged by process, run and node (:mod:`cairn.dev.lines`), and restarts the
worker when a handler's file changes (:mod:`cairn.dev.reload`). :mod:`cairn.dev.plan`
decides what runs where from the settings: the embedded default (SQLite under
``./.cairn``) or the configured PostgreSQL, Redis and Celery broker.
"""

from __future__ import annotations

from typing import Final

# The build every execution under `cairn dev` is made by: its workers name themselves
# "dev@host:pid", so that an execution on reloaded code is never taken for a deployed
# build's. (Build ids of deployments: issue 32.)
DEV_BUILD: Final = "dev"
