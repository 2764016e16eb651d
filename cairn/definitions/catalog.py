"""Find workflow definitions: in YAML/JSON files, Python modules, and directories of both.

A Python module contributes every module-level :class:`WorkflowDefinition`, every
module-level :class:`~cairn.definitions.builder.Workflow` and every workflow declared with
decorators (:func:`~cairn.definitions.decorators.workflow`), built on discovery. A module
with neither is a handler module, not an error: ``cairn validate examples/*`` meets both.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from cairn.definitions.builder import Workflow
from cairn.definitions.decorators import DecoratedWorkflow
from cairn.definitions.loader import load_file
from cairn.errors import CairnError, DefinitionFault, WorkflowDefinitionError
from cairn.model.definition import WorkflowDefinition

DEFINITION_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Found:
    """One definition found at ``source``, or the error that stopped it loading."""

    source: str
    definition: WorkflowDefinition | None = None
    error: CairnError | None = None


def discover(locations: Iterable[str], *, resolve: bool = True) -> list[Found]:
    """Load every definition at ``locations`` (paths or dotted module names)."""
    found: list[Found] = []
    for location in locations:
        found.extend(_discover_one(location, resolve=resolve))
    return found


def load_all(locations: Iterable[str]) -> list[WorkflowDefinition]:
    """Every definition at ``locations``, or one :class:`WorkflowDefinitionError` naming
    every fault of every file that failed (each prefixed with its source): what is
    registered is registered whole, and its author sees everything wrong at once."""
    found = discover(locations)
    failed = [item for item in found if item.error is not None]
    if len(failed) == 1 and isinstance(failed[0].error, WorkflowDefinitionError):
        raise failed[0].error
    if failed:
        raise WorkflowDefinitionError(
            [
                DefinitionFault(fault.code, f"{item.source}: {fault.message}", fault.node)
                for item in failed
                for fault in getattr(item.error, "faults", [])
            ],
            source=", ".join(item.source for item in failed),
        )
    return [item.definition for item in found if item.definition is not None]


def _discover_one(location: str, *, resolve: bool) -> Iterator[Found]:
    path = Path(location)
    if path.is_dir():
        for child in sorted(path.rglob("*")):
            if child.suffix.lower() in DEFINITION_SUFFIXES and "__pycache__" not in child.parts:
                yield from _from_file(child, resolve=resolve)
    elif path.suffix.lower() in DEFINITION_SUFFIXES:
        yield from _from_file(path, resolve=resolve)
    elif path.suffix == ".py":
        yield from _from_module(lambda: _import_path(path), str(path))
    elif not path.exists() and all(part.isidentifier() for part in location.split(".")):
        yield from _from_module(lambda: importlib.import_module(location), location)
    else:
        yield _failure(
            location,
            "not_a_definition",
            f"{location}: not a definition file (.yaml, .yml, .json), a .py module or a directory"
            if path.exists()
            else f"{location}: no such file",
        )


def _from_file(path: Path, *, resolve: bool) -> Iterator[Found]:
    try:
        yield Found(str(path), definition=load_file(path, resolve=resolve))
    except WorkflowDefinitionError as exc:
        yield Found(str(path), error=exc)
    except OSError as exc:
        yield _failure(str(path), "unreadable", f"cannot read {path}: {exc}")


def _from_module(load: object, source: str) -> Iterator[Found]:
    assert callable(load)
    try:
        module: ModuleType = load()
    except Exception as exc:  # an import error in user code is reported, not raised
        yield _failure(
            source, "import_failed", f"importing {source} failed: {type(exc).__name__}: {exc}"
        )
        return
    for name, value in sorted(vars(module).items()):
        if name.startswith("_"):
            continue
        if isinstance(value, WorkflowDefinition):
            yield Found(f"{source}:{name}", definition=value)
        elif isinstance(value, Workflow | DecoratedWorkflow):
            try:
                yield Found(f"{source}:{name}", definition=value.build())
            except WorkflowDefinitionError as exc:
                yield Found(f"{source}:{name}", error=exc)


def _import_path(path: Path) -> ModuleType:
    """Import a .py file under its dotted name when it lies below the working directory,
    so that ``examples/flights.py`` and ``"examples.flights:search"`` are one module."""
    resolved = path.resolve()
    cwd = Path.cwd().resolve()
    if resolved.is_relative_to(cwd):
        parts = resolved.relative_to(cwd).with_suffix("").parts
        if all(part.isidentifier() for part in parts):
            if str(cwd) not in sys.path:
                sys.path.insert(0, str(cwd))
            return importlib.import_module(".".join(parts))
    spec = importlib.util.spec_from_file_location(resolved.stem, resolved)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[resolved.stem] = module
    spec.loader.exec_module(module)
    return module


def _failure(source: str, code: str, message: str) -> Found:
    return Found(
        source, error=WorkflowDefinitionError([DefinitionFault(code, message)], source=source)
    )
