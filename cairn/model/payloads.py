"""What may cross cairn's boundaries as data: JSON that PostgreSQL can store, within a size.

``json.dumps`` alone is not enough: it accepts NaN and Infinity (not JSON), and strings
with NUL characters or lone surrogates, which JSONB refuses. Checking here turns each of
those into a clear, typed error before anything is written.
"""

from __future__ import annotations

import copy
import json
from typing import Any, TypeVar

import orjson

from cairn.errors import InvalidInput

T = TypeVar("T")
_SCALARS = frozenset({str, int, float, bool, type(None)})


def storable_json(value: Any, *, what: str, limit_bytes: int) -> bytes:
    """``value`` as UTF-8 JSON; raise :class:`InvalidInput` naming ``what`` otherwise."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON: {exc}") from exc
    if "\\u0000" in text:
        raise InvalidInput(f"{what} contains a NUL character, which cannot be stored")
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{what} contains text that is not valid Unicode: {exc.reason}") from exc
    if len(encoded) > limit_bytes:
        raise InvalidInput(f"{what} is {len(encoded)} bytes; the limit is {limit_bytes}")
    return encoded


def json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON of data already checked (:func:`storable_json`) — a run's state,
    a step's event: orjson, a twentieth of ``json.dumps``' time on a run's state, which
    every step writes. What orjson refuses (an integer past 64 bits) ``json.dumps``
    writes; keys that are not strings become strings, as ``json.dumps`` makes them."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def json_text(value: Any) -> str:
    """:func:`json_bytes` as text."""
    return json_bytes(value).decode()


def storable_text(value: str) -> bool:
    """Whether a string can be stored as PostgreSQL text."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_copy(value: T) -> T:
    """A deep copy of JSON data — what a run's state holds — made a few times faster than
    :func:`copy.deepcopy` (no memo, scalars kept as they are): a handler's context gets
    one of the state at every step. Anything other than dicts, lists and JSON's scalars
    is left to :func:`copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {  # type: ignore[return-value]
            key: item if type(item) in _SCALARS else json_copy(item)
            for key, item in value.items()  # type: ignore[attr-defined]
        }
    if kind is list:
        return [item if type(item) in _SCALARS else json_copy(item) for item in value]  # type: ignore[attr-defined, return-value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)
