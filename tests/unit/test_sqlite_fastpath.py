"""The SQLite step statements (constant SQL, cairn.store.sqlite_fastpath): a name means
what the portable statements say it means. That they write what the portable statements
write: tests/embedded/test_sqlite_fastpath.py."""

from __future__ import annotations

from pathlib import Path

from cairn.config import Settings
from cairn.runtime import Runtime
from cairn.store.sql import Tx

WORKFLOWS = str(Path(__file__).resolve().parents[1] / "integration" / "workflows")


def test_a_name_means_what_the_portable_statements_say_it_means(tmp_path: Path) -> None:
    """Own definitions first, else the one namespace sharing one; every version, or one."""
    runtime = Runtime.build(Settings(home=tmp_path / "visible", workflows=[WORKFLOWS]))
    try:
        with runtime.store.transaction() as tx:
            for namespace, version in (("acme", 1), ("acme", 2), ("beta", 1), ("gamma", 3)):
                tx.register_workflow(namespace, "shared", version, {"name": "shared"}, 1)
            tx.share_workflow("acme", "shared", "beta", None, by="test")
            tx.share_workflow("gamma", "shared", "delta", 3, by="test")
        asked = [
            ("acme", None, None),
            ("beta", None, None),  # its own, though acme shares one
            ("delta", None, None),  # gamma's, the one offered
            ("delta", None, 2),  # no such version offered
            ("beta", "acme", 1),
            ("zeta", None, None),  # none
        ]
        with runtime.store.reading() as tx:
            fast = [tx.visible_versions(c, "shared", o) for c, o, _v in asked]
            portable = [Tx.visible_versions(tx, c, "shared", o) for c, o, _v in asked]
            chosen = [tx.visible_workflow(c, "shared", o, v) for c, o, v in asked]
        assert [sorted(rows) for rows in fast] == [sorted(rows) for rows in portable]
        assert [(w.owner, w.version, w.owners) for w in chosen] == [
            ("acme", 2, ("acme",)),
            ("beta", 1, ("acme", "beta")),
            ("gamma", 3, ("gamma",)),
            ("gamma", None, ("gamma",)),
            ("acme", 1, ("acme",)),
            (None, None, ()),
        ]
    finally:
        runtime.close()
