"""The API reference: HTML pages for cairn's public surface — the names in the
``__all__`` of ``cairn`` and of ``cairn.http`` — built from their docstrings by pdoc.

    python scripts/api_reference.py build/api     # what `make docs` runs

pdoc (pure Python, no configuration, the docstrings as they are) rather than Sphinx or
MkDocs: the reference is the docstrings, and the pages people read are the markdown in
docs/, which GitHub renders. :func:`undocumented` lists every public name — and every
public method and property of a public class — that has no docstring of its own;
``tests/docs/test_reference.py`` builds the pages and fails on any.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from types import ModuleType

import pdoc
import pdoc.doc
import pdoc.render

PUBLIC = ("cairn", "cairn.http")


def resolved(name: str) -> ModuleType:
    """The module with every name of its ``__all__`` in its namespace: ``cairn`` resolves
    its names when first used (PEP 562), and pdoc reads only what is there."""
    module = importlib.import_module(name)
    for export in module.__all__:
        getattr(module, export)
    return module


def build(out: Path) -> Path:
    """Write the reference into ``out``: one page per public module, and an index."""
    for name in PUBLIC:
        resolved(name)
    pdoc.render.configure(docformat="restructuredtext", show_source=False)
    # Each public package alone, without its internal submodules.
    specs: list[str] = []
    for name in PUBLIC:
        specs += [name, "!" + name.replace(".", r"\.") + r"\."]
    pdoc.pdoc(*specs, output_directory=out)
    return out


def undocumented(modules: Sequence[str] = PUBLIC) -> list[str]:
    """``module.Name`` and ``module.Name.method`` for every public name, and public
    method and property a public class defines, without a docstring."""
    missing: list[str] = []
    for name in modules:
        module = resolved(name)
        page = pdoc.doc.Module(module)
        for export in module.__all__:
            member = page.get(export)
            if member is None or not _docstring(module, member, export):
                missing.append(f"{name}.{export}")
            if isinstance(member, pdoc.doc.Class):
                missing += [f"{name}.{export}.{m}" for m in _undocumented_members(member)]
    return missing


def _docstring(module: ModuleType, member: pdoc.doc.Doc[object], export: str) -> str:
    """A name's docstring; for a re-exported alias (``cairn.State``), the one written
    under it where it is defined (pdoc reads a variable's from its own module's source)."""
    if member.docstring.strip() or not isinstance(member, pdoc.doc.Variable):
        return member.docstring.strip()
    defined_in = getattr(module, "_EXPORTS", {}).get(export)
    if defined_in is None:
        return ""
    there = pdoc.doc.Module(importlib.import_module(defined_in)).get(export)
    return there.docstring.strip() if there is not None else ""


def _undocumented_members(cls: pdoc.doc.Class) -> list[str]:
    missing = []
    for member in cls.own_members:
        if member.name.startswith("_"):
            continue
        static = inspect.getattr_static(cls.obj, member.name, None)
        is_method = isinstance(member, pdoc.doc.Function)
        is_property = isinstance(static, property | cached_property)
        if (is_method or is_property) and not member.docstring.strip():
            missing.append(member.name)
    return missing


def main(target: Path) -> int:
    """Build the reference into ``target``; 1 if a public name has no docstring."""
    index = build(target) / "index.html"
    problems = [f"no docstring: {name}" for name in undocumented()]
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"API reference: {index}" + (f" ({len(problems)} problem(s))" if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    # The cairn of this checkout, whatever else is installed (a second work tree).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "build/api")))
