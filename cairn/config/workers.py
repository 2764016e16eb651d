"""The settings of a Celery worker's processes beyond the step itself: how many async
nodes each keeps awaiting at once, how a fork's branches are grouped into messages.
:class:`~cairn.config.Settings` inherits them."""

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
    branches_per_message: int = Field(
        default=4,
        ge=1,
        le=16,
        description="A fork's plain branches (no limit, not irreversible, not async; same "
        "queue and priority) published with a broker go this many to a message, run one "
        "after another by the worker that takes it; 1: each branch a message of its own.",
    )
    branch_spill_after: float = Field(
        default=0.05,
        gt=0,
        description="Seconds a message's group of branches runs before the branches it "
        "has not begun are published on their own, so a slow branch holds none back.",
    )
