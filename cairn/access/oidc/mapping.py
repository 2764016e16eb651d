"""A verified person's claims to a principal: the name from the name claim, the role and
namespace from the groups (:class:`GroupRoles`). Pure: no I/O, tested on its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.access.keys import NAME
from cairn.access.oidc.errors import NoMappedGroup, NoUsableName, SeveralNamespaces
from cairn.config.oidc import GroupGrant
from cairn.model.principals import Principal, PrincipalKind, Role

# Roles from least to most; a person in several mapped groups gets the highest.
_RANK = {role: rank for rank, role in enumerate(Role)}


@dataclass(frozen=True)
class GroupRoles:
    """``CAIRN_OIDC_ROLES`` with its default namespace, and the groups that may read
    payloads."""

    grants: Mapping[str, GroupGrant]
    namespace: str
    payload_groups: frozenset[str] = frozenset()
    groups_claim: str = "groups"
    name_claim: str = "email"

    def principal(self, claims: Mapping[str, Any]) -> Principal:
        """The person the verified ``claims`` describe, or a :class:`SignInRefused`."""
        subject = str(claims.get("sub", ""))
        name = self.name_of(claims, subject)
        groups = self.groups_of(claims)
        mapped = [group for group in groups if group in self.grants]
        if not mapped:
            raise NoMappedGroup(
                "none of the person's groups is mapped to a role (CAIRN_OIDC_ROLES)",
                subject=subject,
                name=name,
            )
        namespaces = {self.grants[group].namespace or self.namespace for group in mapped}
        if len(namespaces) > 1:
            raise SeveralNamespaces(
                f"the person's groups grant roles in several namespaces: {sorted(namespaces)}",
                subject=subject,
                name=name,
            )
        role = max((self.grants[group].role for group in mapped), key=_RANK.__getitem__)
        return Principal(
            name,
            namespaces.pop(),
            role,
            PrincipalKind.PERSON,
            payloads=any(group in self.payload_groups for group in mapped),
        )

    def name_of(self, claims: Mapping[str, Any], subject: str) -> str:
        """The person's principal name: the name claim, as a principal's name is written
        (an e-mail address lower-cased: one person, one name)."""
        value = claims.get(self.name_claim)
        if self.name_claim == "email":
            if claims.get("email_verified") is False:
                raise NoUsableName("the provider says the e-mail is not verified", subject=subject)
            value = value.lower() if isinstance(value, str) else value
        if not isinstance(value, str) or not NAME.fullmatch(value):
            raise NoUsableName(
                f"the ID token's {self.name_claim!r} claim is missing or is not a principal "
                "name (letters, digits, '.', '_', '-', '@')",
                subject=subject,
            )
        return value

    def groups_of(self, claims: Mapping[str, Any]) -> list[str]:
        """The groups claim as a list of names (one group may come as a bare string)."""
        value = claims.get(self.groups_claim)
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            return [group for group in value if isinstance(group, str)]
        return []


__all__ = ["GroupRoles"]
