"""The contract of namespaced definitions, whichever database is behind the store: a
namespace sees its own workflows and those shared with it, nothing else; the same name
and version may be two namespaces' different definitions; a bare name means the caller's
own workflow before a shared one; a share of one version shows that version only.
``tests/contract`` runs it on SQLite (the portable statements) and PostgreSQL (its
one-read hot path). Subclass it as ``Test...`` beside a ``store`` fixture yielding a
fresh, migrated store.
"""

from __future__ import annotations

from typing import Any

import pytest

from cairn.definitions.loader import load_definition
from cairn.engine.registry import Registry
from cairn.engine.sharing import Sharing
from cairn.errors import (
    AmbiguousWorkflow,
    InvalidInput,
    ShareNotFound,
    UnknownWorkflow,
    VersionConflict,
)
from cairn.model.definition import WorkflowDefinition
from cairn.store.sql import Store


def definition(name: str, version: int, end: str = "succeeded") -> WorkflowDefinition:
    spec: dict[str, Any] = {
        "name": name,
        "version": version,
        "start": "done",
        "nodes": {"done": {"end": end}},
    }
    return load_definition(spec)


def ends(registry: Registry, caller: str, written: str, version: int | None = None) -> str:
    """Which definition ``written`` means to ``caller``: its owner, version and end."""
    found = registry.resolve_for(caller, written, version)
    done = found.nodes["done"]
    return f"{found.namespace}/{found.name}@{found.version}:{getattr(done, 'status', '?')}"


class DefinitionsContract:
    @pytest.fixture
    def store(self) -> Store:
        raise NotImplementedError

    def test_two_namespaces_hold_one_name_and_version_apart(self, store: Store) -> None:
        registry = Registry(store)
        assert registry.register(definition("checkout", 1, "succeeded"), "alpha")
        assert registry.register(definition("checkout", 1, "failed"), "beta")
        assert ends(registry, "alpha", "checkout") == "alpha/checkout@1:succeeded"
        assert ends(registry, "beta", "checkout") == "beta/checkout@1:failed"
        # A fresh registry (another process) reads the same from the store — inside a
        # transaction too (a child run's start, a schedule's tick).
        fresh = Registry(store)
        assert ends(fresh, "beta", "checkout@1") == "beta/checkout@1:failed"
        with store.transaction() as tx:
            assert fresh.resolve_for("alpha", "checkout", tx=tx).namespace == "alpha"
            with pytest.raises(UnknownWorkflow):
                fresh.resolve_for("gamma", "alpha/checkout", tx=tx)
        assert fresh.get("alpha/checkout", 1).namespace == "alpha"

    def test_registering_is_idempotent_and_a_version_immutable(self, store: Store) -> None:
        registry = Registry(store)
        assert registry.register(definition("pay", 1), "alpha")
        assert not registry.register(definition("pay", 1), "alpha")  # the same again
        with pytest.raises(VersionConflict, match="namespace 'alpha'"):
            registry.register(definition("pay", 1, "failed"), "alpha")
        assert Registry(store).register(definition("pay", 1, "failed"), "beta")

    def test_another_namespaces_workflow_is_unknown_until_shared(self, store: Store) -> None:
        registry = Registry(store)
        registry.register(definition("report", 1), "alpha")
        registry.register(definition("report", 2), "alpha")
        for written in ("report", "alpha/report", "alpha/report@1"):
            with pytest.raises(UnknownWorkflow):
                registry.resolve_for("beta", written)
        with store.reading() as tx:
            assert [w.namespace for w in tx.visible_workflows("beta")] == []
        sharing = Sharing(store)
        _share, created = sharing.share("alpha", "report", "beta", 1, by="db:test")
        assert created
        assert ends(registry, "beta", "report") == "alpha/report@1:succeeded"
        with pytest.raises(UnknownWorkflow):  # version 2 is not shared
            registry.resolve_for("beta", "alpha/report@2")
        sharing.share("alpha", "report", "beta", None, by="db:test")
        assert ends(registry, "beta", "alpha/report") == "alpha/report@2:succeeded"
        with store.reading() as tx:
            seen = [(w.namespace, w.name, w.version) for w in tx.visible_workflows("beta")]
        assert seen == [("alpha", "report", 1), ("alpha", "report", 2)]
        sharing.revoke("alpha", "report", "beta", None)
        assert ends(registry, "beta", "report") == "alpha/report@1:succeeded"
        sharing.revoke("alpha", "report", "beta", 1)
        with pytest.raises(UnknownWorkflow):
            registry.resolve_for("beta", "report")
        with pytest.raises(ShareNotFound):
            sharing.revoke("alpha", "report", "beta", 1)

    def test_a_bare_name_is_the_callers_own_before_a_shared_one(self, store: Store) -> None:
        registry = Registry(store)
        registry.register(definition("sync", 1, "succeeded"), "alpha")
        registry.register(definition("sync", 1, "failed"), "beta")
        registry.register(definition("sync", 1, "cancelled"), "gamma")
        sharing = Sharing(store)
        sharing.share("alpha", "sync", "beta", None, by="db:test")
        assert ends(registry, "beta", "sync") == "beta/sync@1:failed"
        assert ends(registry, "beta", "alpha/sync") == "alpha/sync@1:succeeded"
        # Shared with a namespace that has none of its own: the one that shares it...
        sharing.share("alpha", "sync", "delta", None, by="db:test")
        assert ends(registry, "delta", "sync") == "alpha/sync@1:succeeded"
        # ...but two that share one name must be told apart.
        sharing.share("gamma", "sync", "delta", None, by="db:test")
        with pytest.raises(AmbiguousWorkflow, match="alpha/sync, gamma/sync"):
            registry.resolve_for("delta", "sync")
        assert ends(registry, "delta", "gamma/sync") == "gamma/sync@1:cancelled"

    def test_a_share_names_a_registered_workflow_of_its_owner(self, store: Store) -> None:
        registry = Registry(store)
        registry.register(definition("export", 1), "alpha")
        sharing = Sharing(store)
        with pytest.raises(UnknownWorkflow):
            sharing.share("beta", "export", "gamma", None, by="db:test")
        with pytest.raises(UnknownWorkflow):
            sharing.share("alpha", "export", "gamma", 7, by="db:test")
        with pytest.raises(InvalidInput):
            sharing.share("alpha", "export", "alpha", None, by="db:test")
        first, created = sharing.share("alpha", "export", "gamma", None, by="db:test")
        again, created_again = sharing.share("alpha", "export", "gamma", None, by="db:other")
        assert created and not created_again and again == first
        assert first.version is None and first.created_by == "db:test"
        assert sharing.shares("alpha") == [first]
