"""Principals and their API keys, made straight in a store for tests that need several
roles (a console test signs in as each)."""

from __future__ import annotations

from cairn.access import KeyManager
from cairn.model.principals import Principal, Role
from cairn.store.sql import Store

SETUP = Principal("setup", "default", Role.ADMIN)


def mint_keys(store: Store, principals: dict[str, tuple[Role, bool]]) -> dict[str, str]:
    """name → (role, may read payloads), each made in namespace ``default`` with one key:
    name → that key."""
    manager = KeyManager(store)
    made = {}
    for name, (role, payloads) in principals.items():
        manager.create_principal("default", name, role, payloads=payloads, by=SETUP)
        made[name] = manager.mint("default", name).key
    return made
