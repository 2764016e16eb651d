"""Compile the declarative form (a mapping, YAML or JSON) into a :class:`WorkflowDefinition`.

Parsing never stops at the first problem: every fault in the shape is collected, then
the graph checks of :mod:`cairn.definitions.validation` run on whatever parsed, and one
:class:`~cairn.errors.WorkflowDefinitionError` reports all of them. Every mapping is
closed (:mod:`cairn.definitions.format`): an unknown key is a fault with a suggestion;
``x-`` keys and ``metadata`` are kept in ``extra``.

The parts: :mod:`~cairn.definitions.text` turns YAML/JSON text into data,
:mod:`~cairn.definitions.top_level` reads the workflow's own keys,
:mod:`~cairn.definitions.nodes` and :mod:`~cairn.definitions.tasks` its nodes,
:mod:`~cairn.definitions.anomaly_block` the ``anomaly`` block, all with the field readers
of :mod:`~cairn.definitions.reader`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cairn.definitions import format as fmt
from cairn.definitions.reader import ParsedSpec, Reader
from cairn.definitions.top_level import read_workflow
from cairn.definitions.validation import validate_graph
from cairn.errors import DefinitionFault, WorkflowDefinitionError
from cairn.model.definition import WorkflowDefinition

log = logging.getLogger(__name__)


def load_definition(
    spec: object,
    *,
    source: str | None = None,
    resolve: bool = True,
    registered: bool = False,
    implied_format: int = fmt.FORMAT_VERSION,
) -> WorkflowDefinition:
    """Compile a definition mapping; raise :class:`WorkflowDefinitionError` with every fault.

    ``resolve`` imports every handler, guard and compensation now, so a definition that
    loads is one a worker can run. Turn it off only to inspect a definition whose code is
    not installed here (``cairn describe``).

    ``registered`` reads a definition the store already holds: runs are pinned to it and
    it cannot change, so a key this cairn does not know (registered before keys were
    checked, or by a newer cairn) is logged and ignored rather than refused.

    ``implied_format`` is the format of a definition that declares none: the newest for a
    new definition; for a registered one, the format it was registered under (a version
    keeps the semantics its runs were pinned to).
    """
    faults: list[DefinitionFault] = []
    if isinstance(spec, ParsedSpec):
        faults, spec = list(spec.faults), spec.data
    try:
        fmt.check_data_shape(spec)
    except fmt.TooComplex as exc:
        fault = DefinitionFault("too_complex", str(exc))
        raise WorkflowDefinitionError([fault], source=source) from None
    reader = Reader(
        resolve=resolve, faults=faults, strict=not registered, implied_format=implied_format
    )
    definition = read_workflow(reader, spec)
    if definition is not None:
        reader.faults.extend(validate_graph(definition))
    if reader.ignored:
        log.warning("%s: ignoring what this cairn does not know: %s", source, reader.ignored)
    if reader.faults:
        raise WorkflowDefinitionError(reader.faults, source=source)
    assert definition is not None
    return definition


def load_file(path: str | Path, *, resolve: bool = True) -> WorkflowDefinition:
    """Load a ``.yaml``/``.yml``/``.json`` definition file. Duplicate keys are faults."""
    # The parsers are imported by a definition read from text, not by every process that
    # loads registered definitions (stored as data).
    from cairn.definitions.text import parse_text  # noqa: PLC0415

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise WorkflowDefinitionError(
            [DefinitionFault("syntax", f"not UTF-8 text: {exc.reason} at byte {exc.start}")],
            source=str(path),
        ) from None
    return load_definition(
        parse_text(text, path.suffix, source=str(path)), source=str(path), resolve=resolve
    )
