"""A run's priority: an integer from :data:`MIN_PRIORITY` to :data:`MAX_PRIORITY`, higher
first — for the next free concurrency slot and for the next worker (the broker's bands,
:mod:`cairn.workers.fairness`). The default, 0, is the middle: a run can be put ahead of
the rest, or behind it (a backfill, a bulk re-run)."""

from __future__ import annotations

from cairn.errors import InvalidInput

MIN_PRIORITY = -5
MAX_PRIORITY = 5
DEFAULT_PRIORITY = 0


class InvalidPriority(InvalidInput):
    """A priority that is not an integer from -5 to 5."""

    code = "invalid_priority"


def check_priority(value: object) -> int:
    """``value`` as a run's priority (None: the default), or :class:`InvalidPriority`."""
    if value is None:
        return DEFAULT_PRIORITY
    # bool is an int to Python, never a priority; nor is 1.0 or "1" (a typed field).
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPriority(
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, not {value!r:.40}"
        )
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidPriority(
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY} (higher first), not {value}"
        )
    return value
