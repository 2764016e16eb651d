"""The size ceilings `make lint` checks (scripts/ceilings.py): they catch a long module, a
long function or method, a known offender that grew, and a known one no longer needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ceilings.py"


def _ceilings() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ceilings", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _function(name: str, lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}def {name}() -> None:\n{body}"


def test_offenders_are_named_and_the_known_list_only_shrinks(tmp_path: Path) -> None:
    ceilings = _ceilings()
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "short.py").write_text(_function("fine", 60))
    (package / "long.py").write_text(
        _function("too_long", 61) + "class Kept:\n" + _function("method", 70, "    ")
    )
    (package / "big.py").write_text("x = 1\n" * 601)

    found = ceilings.offenders(package, {})
    assert found == [
        "pkg/big.py: 601 lines (module ceiling 600)",
        "pkg/long.py:too_long: 61 lines (function ceiling 60)",
        "pkg/long.py:Kept.method: 70 lines (function ceiling 60)",
    ]

    known = {"pkg/long.py:too_long": 61, "pkg/long.py:Kept.method": 65, "pkg/short.py:fine": 90}
    assert ceilings.offenders(package, known) == [
        "pkg/big.py: 601 lines (module ceiling 600)",
        "pkg/long.py:Kept.method: 70 lines, grown past its known 65",
        "pkg/short.py:fine: within the ceiling now; take it out of KNOWN",
    ]
