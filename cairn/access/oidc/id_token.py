"""Verifying an ID token (OpenID Connect Core 1.0, 3.1.3.7): its signature by one of the
provider's published keys, with an algorithm the provider announced and cairn accepts;
then its claims — the issuer exactly, this client among the audiences (and as the
authorised party when there are several), not expired, not issued in the future, and the
nonce of this very login. Each failure is its own :class:`~cairn.access.oidc.errors.InvalidToken`.
"""

from __future__ import annotations

import hmac
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import BadSignatureError, ClaimError, ExpiredTokenError, JoseError
from joserfc.jwt import JWTClaimsRegistry

from cairn.access.oidc.errors import (
    BadSignature,
    InvalidToken,
    NonceMismatch,
    TokenExpired,
    WrongAudience,
    WrongIssuer,
)
from cairn.access.oidc.provider import Provider

# Clock difference tolerated between the provider and cairn, seconds.
LEEWAY_S = 60


def verify_id_token(
    id_token: str, *, provider: Provider, client_id: str, nonce: str, now: float
) -> dict[str, Any]:
    """The claims of ``id_token`` once verified (see the module's docstring)."""
    claims = _signed_claims(id_token, provider)
    if claims.get("iss") != provider.issuer:
        raise WrongIssuer(f"the ID token was issued by {str(claims.get('iss'))[:200]!r}")
    audiences = claims.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else audiences
    if not isinstance(audiences, list) or client_id not in audiences:
        raise WrongAudience("the ID token was issued to another client")
    if len(audiences) > 1 and claims.get("azp") != client_id:
        raise WrongAudience("the ID token has several audiences and this client is not its azp")
    found = claims.get("nonce")
    if not isinstance(found, str) or not hmac.compare_digest(found.encode(), nonce.encode()):
        raise NonceMismatch("the ID token's nonce is not this login's")
    registry = JWTClaimsRegistry(
        now=int(now),
        leeway=LEEWAY_S,
        sub={"essential": True},
        exp={"essential": True},
        iat={"essential": True},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError as exc:
        raise TokenExpired("the ID token has expired") from exc
    except ClaimError as exc:
        raise InvalidToken(f"the ID token's claims are not valid: {exc.description}") from exc
    if not isinstance(claims["sub"], str):
        raise InvalidToken("the ID token's subject is not a string")
    return claims


def _signed_claims(id_token: str, provider: Provider) -> dict[str, Any]:
    try:
        header = jws.extract_compact(id_token.encode()).headers()
    except (JoseError, ValueError, UnicodeError) as exc:
        raise InvalidToken("the ID token is not a signed JWT") from exc
    algorithm = header.get("alg")
    accepted = provider.discovery().algorithms
    if algorithm not in accepted:
        raise InvalidToken(
            f"the ID token is signed with {str(algorithm)[:20]!r}; accepted: {sorted(accepted)}"
        )
    kid = header.get("kid")
    key = provider.key(kid if isinstance(kid, str) else None)
    try:
        return jwt.decode(id_token, key, algorithms=[algorithm]).claims
    except BadSignatureError as exc:
        raise BadSignature("the ID token's signature does not verify") from exc
    except (JoseError, ValueError) as exc:
        raise InvalidToken(f"the ID token cannot be read: {type(exc).__name__}") from exc


__all__ = ["LEEWAY_S", "verify_id_token"]
