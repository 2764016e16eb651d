"""The settings of sign-in through OpenID Connect (the console's, for teams), declared and
checked here, beside their own parsing; :class:`~cairn.config.Settings` inherits them.

``CAIRN_OIDC_ROLES`` maps the identity provider's groups to a role and a namespace:
``cairn-admins=admin,cairn-approvers=approver@acme`` — a group without ``@namespace``
grants its role in ``CAIRN_OIDC_NAMESPACE``. A mistake in it stops the process at start
(:class:`~cairn.errors.ConfigError`): a typo must not quietly lock a team out, or let one in.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from cairn.config.secrets import NAMESPACE
from cairn.model.principals import Role

ROLE_NAMES = ", ".join(role.value for role in Role)


class GroupGrant(BaseModel):
    """What membership of one identity-provider group grants: a role in a namespace
    (``None``: ``CAIRN_OIDC_NAMESPACE``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    namespace: str | None = None


class OidcSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    oidc_issuer: str | None = Field(
        default=None,
        description="The OpenID provider's issuer URL (its discovery document is under it); "
        "unset: no sign-in through OpenID Connect.",
    )
    oidc_client_id: str | None = Field(
        default=None, description="cairn's client id at the provider."
    )
    oidc_client_secret: SecretStr | None = Field(
        default=None,
        description="cairn's client secret at the provider; unset or empty: a public client "
        "(PKCE only).",
    )
    oidc_redirect_url: str | None = Field(
        default=None,
        description="Where the provider sends the browser back: the console's callback URL, "
        "as registered at the provider.",
    )
    oidc_scopes: list[str] = Field(
        default_factory=lambda: ["openid", "email", "profile"],
        description="Scopes asked for (comma- or space-separated); 'openid' among them.",
    )
    oidc_groups_claim: str = Field(
        default="groups", min_length=1, description="The ID token's claim listing the groups."
    )
    oidc_name_claim: str = Field(
        default="email",
        min_length=1,
        description="The ID token's claim that names the person (person:<name>).",
    )
    oidc_roles: dict[str, GroupGrant] = Field(
        default_factory=dict,
        description="Groups to roles: 'cairn-admins=admin,cairn-approvers=approver@acme'; a "
        "person gets the highest role their groups map to, and no access in none.",
    )
    oidc_namespace: str = Field(
        default="default",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        description="The namespace of the groups of CAIRN_OIDC_ROLES that name none.",
    )
    oidc_payload_groups: list[str] = Field(
        default_factory=list,
        description="Comma-separated groups (mapped in CAIRN_OIDC_ROLES) whose members may "
        "read payloads.",
    )

    @field_validator("oidc_scopes", "oidc_payload_groups", mode="before")
    @classmethod
    def _split_words(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part for part in value.replace(",", " ").split() if part]
        return value

    @field_validator("oidc_roles", mode="before")
    @classmethod
    def _roles(cls, value: Any) -> Any:
        return parse_group_roles(value) if isinstance(value, str) else value

    @field_validator("oidc_client_secret", mode="before")
    @classmethod
    def _no_empty_secret(cls, value: Any) -> Any:
        return None if value == "" else value  # set to nothing: a public client

    @field_validator("oidc_issuer", "oidc_redirect_url")
    @classmethod
    def _secure_url(cls, value: str | None) -> str | None:
        return None if value is None else secure_url(value)

    @model_validator(mode="after")
    def _complete(self) -> OidcSettings:
        if self.oidc_issuer is None:
            given = [
                name
                for name in ("oidc_client_id", "oidc_client_secret", "oidc_redirect_url")
                if getattr(self, name) is not None
            ]
            if given or self.oidc_roles:
                names = ", ".join(f"CAIRN_{name.upper()}" for name in given or ["oidc_roles"])
                raise ValueError(f"{names} given without CAIRN_OIDC_ISSUER")
            return self
        missing = [
            f"CAIRN_{name.upper()}"
            for name in ("oidc_client_id", "oidc_redirect_url", "oidc_roles")
            if not getattr(self, name)
        ]
        if missing:
            raise ValueError(f"CAIRN_OIDC_ISSUER needs {', '.join(missing)} too")
        if "openid" not in self.oidc_scopes:
            raise ValueError("CAIRN_OIDC_SCOPES must include 'openid'")
        unmapped = sorted(set(self.oidc_payload_groups) - set(self.oidc_roles))
        if unmapped:
            raise ValueError(
                f"CAIRN_OIDC_PAYLOAD_GROUPS names {unmapped}, which CAIRN_OIDC_ROLES does not map"
            )
        return self


def parse_group_roles(text: str) -> dict[str, GroupGrant]:
    """``"cairn-admins=admin,cairn-approvers=approver@acme"`` → each group's grant; a
    :class:`ValueError` naming the entry at fault otherwise."""
    grants: dict[str, GroupGrant] = {}
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        group, equals, grant = part.rpartition("=")
        group = group.strip()
        role, at, namespace = grant.strip().partition("@")
        if not equals or not group:
            raise ValueError(f"{part!r}: an entry is GROUP=ROLE or GROUP=ROLE@NAMESPACE")
        if role not in {r.value for r in Role}:
            raise ValueError(f"{part!r}: the role is one of {ROLE_NAMES}, not {role!r}")
        if at and not NAMESPACE.fullmatch(namespace):
            raise ValueError(f"{part!r}: {namespace!r} is not a valid namespace name")
        if group in grants:
            raise ValueError(f"group {group!r} is mapped twice")
        grants[group] = GroupGrant(role=Role(role), namespace=namespace if at else None)
    return grants


def secure_url(url: str) -> str:
    """``url`` if it is absolute and HTTPS — or plain HTTP to this machine (a test, a
    laptop): a sign-in's codes and tokens never cross a network in clear."""
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError(f"{url!r} is not an absolute http(s) URL")
    if parts.fragment:
        raise ValueError(f"{url!r}: no fragment (#...) is allowed")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ValueError(f"{url!r}: HTTPS is required (plain HTTP only to this machine)")
    return url


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["GroupGrant", "OidcSettings", "parse_group_roles", "secure_url"]
