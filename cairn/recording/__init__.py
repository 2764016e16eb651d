"""What a step's calls to the outside leave in its record, and how they are answered from
it when the step runs again or is replayed: model calls (:mod:`~cairn.recording.calls`,
the recorder; :mod:`~cairn.recording.sdk`, the SDK clients ``ctx.model`` wraps;
:mod:`~cairn.recording.streams`, :mod:`~cairn.recording.compaction`) and a handler's own
HTTP (:mod:`~cairn.recording.http`, :mod:`~cairn.recording.scope`).

The step hands the recorder what it needs — the store to write through, the claim to fence
by, the rate limiter — and the package imports neither the engine's write path nor Celery
(an import contract in pyproject.toml)."""
