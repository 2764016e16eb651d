"""The ``reducers`` block: the state keys that accumulate, and how (``append``, ``add``,
``merge``: :mod:`cairn.model.reducers`).

    reducers: {notes: append, cost_usd: add, facts: merge}

An unknown reducer, a key that is not a key, and a branch ``default`` that gives an
accumulating key a value its reducer cannot take are ``bad_reducer`` faults.
"""

from __future__ import annotations

from collections.abc import Mapping

from cairn.definitions.reader import Reader
from cairn.model.definition import AnyNode
from cairn.model.reducers import Reducer, fits

NAMES = ", ".join(reducer.value for reducer in Reducer)


def read_reducers(reader: Reader, raw: object, nodes: Mapping[str, AnyNode]) -> dict[str, Reducer]:
    """``raw`` (state key -> reducer name) read, its faults recorded on ``reader``."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        reader.fault("bad_reducer", f"'reducers' maps state keys to one of {NAMES}")
        return {}
    reducers: dict[str, Reducer] = {}
    for key, name in raw.items():
        if not isinstance(key, str) or not key:
            reader.fault("bad_reducer", f"'reducers': {key!r} is not a state key")
        elif name not in {reducer.value for reducer in Reducer}:
            reader.fault(
                "bad_reducer",
                f"'reducers': state key {key!r} has reducer {name!r}; a reducer is one of {NAMES}",
            )
        else:
            reducers[key] = Reducer(name)
    for node_id, node in nodes.items():
        for key, value in (node.default or {}).items():
            reducer = reducers.get(key)
            if reducer is not None and not fits(reducer, value):
                reader.fault(
                    "bad_reducer",
                    f"the default gives state key {key!r} {value!r}, but it accumulates by "
                    f"{reducer.value}: a default adds {reducer.holds}",
                    node_id,
                )
    return reducers
