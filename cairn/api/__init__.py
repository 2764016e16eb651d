"""The HTTP API (``cairn api``): FastAPI on uvicorn, versioned under ``/v1``.

Long work never holds a connection: submit answers 202 with the run's id at once, and
the caller reads, streams, signals and cancels the run later. See ``docs/api.md``.
"""

from cairn.api.app import create_app

__all__ = ["create_app"]
