"""Registered versions keep their semantics: a version registered under definition
format 1 (before tasks had a default retry and timeout) means format 1 for as long as
runs may be pinned to it, whoever registers the same file again."""

from __future__ import annotations

from cairn.definitions.format import FORMAT_VERSION
from cairn.definitions.loader import load_definition
from cairn.engine.registry import Registry
from cairn.model.definition import DEFAULT_NODE_TIMEOUT, DEFAULT_RETRY, NO_RETRY
from cairn.store.sql import Store

SPEC = {
    "name": "legacy",
    "version": 1,
    "start": "fetch",
    "nodes": {
        "fetch": {"handler": "examples.flights:search", "next": "done"},
        "done": {"end": "succeeded"},
    },
}


def _registered_before_format_2(store: Store) -> None:
    """The row an older cairn wrote: the migration gave it format 1."""
    with store.transaction() as tx:
        assert tx.register_workflow("default", "legacy", 1, SPEC, 1)


def test_a_new_version_is_registered_under_the_newest_format(store: Store) -> None:
    registry = Registry(store)
    assert registry.register(load_definition(SPEC))
    fresh = Registry(store).get("legacy", 1)  # a process that did not register it
    assert fresh.format == FORMAT_VERSION
    assert fresh.nodes["fetch"].retry == DEFAULT_RETRY
    assert fresh.nodes["fetch"].timeout == DEFAULT_NODE_TIMEOUT


def test_a_version_registered_under_format_1_keeps_format_1_semantics(store: Store) -> None:
    _registered_before_format_2(store)
    loaded = Registry(store).get("legacy", 1)
    assert loaded.format == 1
    assert loaded.nodes["fetch"].retry == NO_RETRY and loaded.nodes["fetch"].timeout is None


def test_registering_the_same_file_again_keeps_the_stored_format(store: Store) -> None:
    """A worker starting with CAIRN_WORKFLOWS registers every file again: that changes
    nothing stored, and its own registry answers with what is stored, not the file's
    newer reading of it."""
    _registered_before_format_2(store)
    registry = Registry(store)
    assert not registry.register(load_definition(SPEC))  # the same spec: accepted, unchanged
    assert registry.get("legacy", 1).format == 1
