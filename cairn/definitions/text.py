"""Definition text to data: YAML or JSON, within the hostile-input limits of
:mod:`cairn.definitions.format`, with duplicate keys (which both parsers drop silently)
reported as faults and every syntax error made one line long."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

from cairn.definitions import format as fmt
from cairn.definitions.reader import ParsedSpec
from cairn.errors import DefinitionFault, WorkflowDefinitionError


def parse_text(text: str, suffix: str = ".yaml", *, source: str | None = None) -> Any:
    """Parse definition text, reporting duplicate keys (YAML and JSON both drop them silently).

    Duplicates come back inside a :class:`ParsedSpec` so that they join the other faults
    instead of hiding them.
    """
    is_json = suffix.lower() == ".json"
    kind = "JSON" if is_json else "YAML"
    try:
        if is_json:
            try:
                data = json.loads(text)
            except RecursionError:
                raise fmt.TooComplex(
                    f"the definition is nested more than {fmt.MAX_DEPTH} levels deep"
                ) from None
            fmt.check_data_shape(data)
        else:
            fmt.check_yaml_shape(text)
            data = yaml.load(text, Loader=fmt.safe_loader())
    except fmt.TooComplex as exc:
        raise WorkflowDefinitionError(
            [DefinitionFault("too_complex", str(exc))], source=source
        ) from None
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise WorkflowDefinitionError(
            [DefinitionFault("syntax", f"not valid {kind}: {_syntax_reason(exc)}")], source=source
        ) from None
    # JSON is (near enough) YAML, so one composer finds duplicates in both. YAML refuses
    # tab indentation; in valid JSON a tab can only be whitespace, so it may become a space.
    composable = text.replace("\t", " ") if is_json else text
    try:
        duplicates = list(_duplicate_keys(yaml.compose(composable, Loader=fmt.safe_loader()), ()))
    except yaml.YAMLError:
        duplicates = []
    return ParsedSpec(data, duplicates) if duplicates else data


def _syntax_reason(exc: Exception) -> str:
    """One line: what is wrong and where (not a page of parser context)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem}{where}"
    return " ".join(str(exc).split())


def _duplicate_keys(node: yaml.Node | None, path: tuple[str, ...]) -> Iterator[DefinitionFault]:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                owner = key if path == ("nodes",) else (path[1] if path[:1] == ("nodes",) else None)
                where = ".".join(path) or "the top level"
                yield DefinitionFault(
                    "duplicate_name", f"{key!r} is defined more than once in {where}", owner
                )
            seen.add(key)
            yield from _duplicate_keys(value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _duplicate_keys(item, path)
