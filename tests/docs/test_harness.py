"""The page runner itself: which blocks it finds, which markers it accepts, and that a
failing command fails the page — wherever it stands in its block — and that nothing a
page starts outlives it. No services: pages written here, run in a temporary folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.docs import session
from tests.docs.blocks import Marker, MarkerError, page_blocks
from tests.docs.session import Outcome, commands, marked, new_token, run_page

PAGE = """\
# A page

```bash
export GREETING=hello
```

```yaml
not: run
```

<!-- docs-test: skip: needs a provider's key -->
```bash
exit 7
```

```python
import os
print(os.environ["GREETING"], "from python")
```
"""


def run(tmp_path: Path, text: str) -> Outcome:
    folder = tmp_path / "page"
    folder.mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DOCS_TEST_RUN": new_token(),
    }
    return run_page(page_blocks(text, "page.md"), folder, Path(sys.executable), env, 60)


def test_shell_and_python_blocks_are_found_in_order_with_their_markers() -> None:
    blocks = page_blocks(PAGE, "page.md")
    assert [(b.line, b.language, b.marker) for b in blocks] == [
        (3, "shell", Marker()),
        (12, "shell", Marker(skip="needs a provider's key")),
        (16, "python", Marker()),
    ]
    assert blocks[0].where == "page.md:3"


@pytest.mark.parametrize(
    ("marker", "complaint"),
    [
        ("<!-- docs-test: skip -->\n```bash\ntrue\n```", "needs a reason"),
        ("<!-- docs-test: later -->\n```bash\ntrue\n```", "unknown docs-test marker"),
        ("<!-- docs-test: background -->\n\nText.\n\n```bash\ntrue\n```", "right before"),
        ("<!-- docs-test: skip: why -->\n```yaml\na: 1\n```", "not shell or Python"),
        ("```bash\ntrue\n```\n\n<!-- docs-test: skip: why -->\n", "no block after it"),
    ],
)
def test_a_marker_the_runner_cannot_honour_is_an_error(marker: str, complaint: str) -> None:
    with pytest.raises(MarkerError, match=complaint):
        page_blocks(marker, "page.md")


def test_the_background_marker_may_say_when_the_block_is_ready() -> None:
    (block,) = page_blocks(
        "<!-- docs-test: background; ready: test -e up -->\n```bash\nserve\n```", "p.md"
    )
    assert block.marker == Marker(background=True, ready="test -e up")


def test_a_block_is_cut_into_its_top_level_commands() -> None:
    block = (
        'A=1\nfalse && echo no   # a comment\nif true; then\n  echo "a\nb"\nfi\nls \\\n  -l\n'
        "cat > x.py <<'PY'\ndef f():\n    pass\nPY\n"
    )
    assert commands(block) == [
        "A=1",
        "false && echo no   # a comment",
        'if true; then\n  echo "a\nb"\nfi',
        "ls \\\n  -l",
        "cat > x.py <<'PY'\ndef f():\n    pass\nPY",
    ]


def test_a_page_runs_in_one_session_and_python_sees_the_shell_s_exports(
    tmp_path: Path,
) -> None:
    outcome = run(tmp_path, PAGE)
    assert outcome.returncode == 0, outcome.log
    assert "hello from python" in outcome.log
    assert "skipped: needs a provider's key" in outcome.log


def test_a_failing_command_fails_the_page_even_as_the_first_of_a_list(tmp_path: Path) -> None:
    """``set -e`` would let ``false && echo`` pass: the runner checks every command."""
    outcome = run(tmp_path, "```bash\ntrue\nfalse && echo never\necho after\n```\n")
    assert outcome.returncode == 1
    assert outcome.failed is not None
    assert (outcome.failed.block.where, outcome.failed.command) == (
        "page.md:1",
        "false && echo never",
    )
    assert "after" not in outcome.log


def test_a_failing_python_block_fails_the_page(tmp_path: Path) -> None:
    outcome = run(tmp_path, "```python\nraise SystemExit(3)\n```\n\n```bash\necho next\n```\n")
    assert outcome.returncode == 3
    assert outcome.failed is not None
    assert outcome.failed.block.language == "python"
    assert "next" not in outcome.log


def test_what_a_page_starts_in_the_background_is_ended_with_it(tmp_path: Path) -> None:
    """A background block, a job started with ``&`` and one that left the session
    (``setsid``): all of them ended when the page is done."""
    page = (
        "<!-- docs-test: background; ready: test -e started -->\n"
        "```bash\ntouch started\nsleep 300\n```\n\n"
        "```bash\nsleep 301 &\n(setsid sleep 302 &)\n```\n"
    )
    outcome = run(tmp_path, page)
    assert outcome.returncode == 0, outcome.log
    assert outcome.survivors == []


def test_a_background_block_that_never_gets_ready_fails_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "READY_TIMEOUT_S", 1)
    outcome = run(
        tmp_path, "<!-- docs-test: background; ready: false -->\n```bash\nsleep 300\n```\n"
    )
    assert outcome.returncode == 124
    assert outcome.failed is not None
    assert outcome.failed.command == "(ready when) false"
    assert outcome.survivors == []


def test_no_process_carries_a_fresh_token() -> None:
    assert list(marked(new_token())) == []
