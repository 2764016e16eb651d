"""The settings of a Celery worker's processes beyond the step itself: how many async
nodes each keeps awaiting at once. :class:`~cairn.config.Settings` inherits them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class WorkerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    async_nodes: int = Field(
        default=256,
        ge=0,
        description="How many async nodes one worker process keeps awaiting at once "
        "without holding a pool slot (a prefork process, a thread): each is handed to the "
        "process's event loop and its message acked once its result is committed; past "
        "this many, the next one waits for a place. 0: an async node holds its pool slot "
        "while it awaits, as a plain handler does.",
    )
