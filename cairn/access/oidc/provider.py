"""The OpenID provider as cairn reads it: its discovery document and its signing keys
(JWKS), fetched with httpx and kept.

The discovery document is kept for an hour. The keys are kept until a token names a key
id (``kid``) they lack — the provider rotated its keys — and then fetched again, at most
once every :data:`JWKS_REFETCH_S`: a stream of tokens with made-up key ids must not turn
cairn into a hammer on the provider.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import JWKRegistry, Key

from cairn.access.oidc.errors import BadSignature, ProviderUnavailable
from cairn.config.oidc import secure_url

DISCOVERY_TTL_S = 3600.0
JWKS_REFETCH_S = 10.0
DISCOVERY_PATH = "/.well-known/openid-configuration"
# Asymmetric algorithms only: "none" is no signature, and HS256 would make the client
# secret a key anyone holding it could sign tokens with.
SIGNING_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


@dataclass(frozen=True)
class Discovery:
    """What cairn uses of the provider's discovery document."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: frozenset[str]  # the ID token's signing algorithms cairn accepts
    token_auth_methods: tuple[str, ...]

    @classmethod
    def parse(cls, issuer: str, document: dict[str, Any]) -> Discovery:
        if document.get("issuer") != issuer:
            # OpenID Connect Discovery 1.0, 4.3: the document must name the issuer it is
            # fetched from, exactly; another issuer's endpoints are not this one's.
            raise ProviderUnavailable(
                f"the discovery document names issuer {document.get('issuer')!r}, not {issuer!r}"
            )
        try:
            authorize, token, jwks = (
                secure_url(str(document[name]))
                for name in ("authorization_endpoint", "token_endpoint", "jwks_uri")
            )
        except (KeyError, ValueError) as exc:
            raise ProviderUnavailable(f"the discovery document is unusable: {exc}") from exc
        offered = document.get("id_token_signing_alg_values_supported") or ["RS256"]
        methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        return cls(
            issuer,
            authorize,
            token,
            jwks,
            algorithms=SIGNING_ALGORITHMS & {str(alg) for alg in offered},
            token_auth_methods=tuple(str(method) for method in methods),
        )


class Provider:
    """One issuer's discovery document and keys, cached (thread-safe: the console's
    routes run in a thread pool)."""

    def __init__(
        self,
        issuer: str,
        http: httpx.Client,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.http = http
        self.clock = clock
        self._lock = threading.Lock()
        self._discovery: tuple[float, Discovery] | None = None
        self._keys: tuple[float, dict[str, Key]] | None = None

    def discovery(self) -> Discovery:
        with self._lock:
            cached = self._discovery
        if cached is not None and self.clock() - cached[0] < DISCOVERY_TTL_S:
            return cached[1]
        url = self.issuer.rstrip("/") + DISCOVERY_PATH
        found = Discovery.parse(self.issuer, self.get_json(url))
        with self._lock:
            self._discovery = (self.clock(), found)
        return found

    def key(self, kid: str | None) -> Key:
        """The provider's signing key ``kid`` (the only one, for a token that names none);
        :class:`BadSignature` if the provider publishes no such key."""
        with self._lock:
            cached = self._keys
        if cached is None or (
            self._lookup(cached[1], kid) is None and self.clock() - cached[0] >= JWKS_REFETCH_S
        ):
            cached = (self.clock(), self._fetch_keys())
            with self._lock:
                self._keys = cached
        found = self._lookup(cached[1], kid)
        if found is None:
            raise BadSignature("the token is signed with a key the provider does not publish")
        return found

    @staticmethod
    def _lookup(keys: dict[str, Key], kid: str | None) -> Key | None:
        if kid is None:
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    def _fetch_keys(self) -> dict[str, Key]:
        document = self.get_json(self.discovery().jwks_uri)
        keys: dict[str, Key] = {}
        entries = document.get("keys")
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue  # an encryption key, or nonsense: never a signature's
            try:
                key = JWKRegistry.import_key(entry)
            except (JoseError, ValueError, TypeError):
                continue  # a kind of key cairn does not know (RFC 7517, 5: ignore it)
            if key.is_private:
                continue  # a provider publishing private keys signs nothing cairn trusts
            key.ensure_kid()
            keys[str(key.kid)] = key
        return keys

    def get_json(self, url: str) -> dict[str, Any]:
        try:
            response = self.http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(f"{url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise ProviderUnavailable(f"{url} answered {response.status_code}")
        try:
            found = response.json()
        except ValueError as exc:
            raise ProviderUnavailable(f"{url} did not answer JSON") from exc
        if not isinstance(found, dict):
            raise ProviderUnavailable(f"{url} did not answer a JSON object")
        return found


__all__ = ["DISCOVERY_TTL_S", "JWKS_REFETCH_S", "SIGNING_ALGORITHMS", "Discovery", "Provider"]
