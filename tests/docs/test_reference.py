"""The API reference and the links between the pages: ``make docs`` builds the reference
of cairn's public surface and fails on a public name without a docstring or a broken
link in README.md and docs/*.md (``scripts/api_reference.py``, ``scripts/doc_links.py``);
here it is built, and both checks are shown to catch what they are for."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.services import ROOT


def script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
def test_make_docs_builds_a_page_for_every_public_name(tmp_path: Path) -> None:
    built = subprocess.run(
        ["make", "-s", "docs", f"PYTHON={sys.executable}", f"DOCS_OUT={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    for module, page in [("cairn", "cairn.html"), ("cairn.http", "cairn/http.html")]:
        html = (tmp_path / page).read_text()
        for name in importlib.import_module(module).__all__:
            assert f'id="{name}"' in html, f"{module}.{name} is not in {page}"
    assert (tmp_path / "index.html").exists()


def test_every_public_name_has_a_docstring() -> None:
    assert script("api_reference").undocumented() == []


def test_the_docstring_check_finds_every_gap() -> None:
    missing = script("api_reference").undocumented(["tests.docs.sample_api"])
    assert sorted(missing) == [
        "tests.docs.sample_api.Gaps.unsaid",
        "tests.docs.sample_api.Gaps.unsaid_property",
        "tests.docs.sample_api.bare",
    ]


def test_the_pages_have_no_broken_links() -> None:
    assert script("doc_links").all_broken() == []


def test_the_link_check_finds_missing_files_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# Top\n\n[ok](docs/a.md#the-ctxeffect-call) [gone](docs/nope.md) "
        "[here](#top) [not here](#bottom) [web](https://example.com/x#y)\n"
    )
    (tmp_path / "docs" / "a.md").write_text(
        '# A\n\n## The `ctx.effect()` call\n\n## Twice\n\n## Twice\n\n<a id="kept"></a>\n\n'
        "[second](#twice-1) [third](#twice-2) [explicit](a.md#kept) [up](../README.md)\n"
        "![picture](images/none.svg)\n"
    )
    problems = script("doc_links").all_broken(tmp_path)
    assert problems == [
        "README.md:3: docs/nope.md (no such file)",
        "README.md:3: #bottom (no such anchor in README.md)",
        "docs/a.md:11: #twice-2 (no such anchor in a.md)",
        "docs/a.md:11: images/none.svg (no such file)",
    ]
