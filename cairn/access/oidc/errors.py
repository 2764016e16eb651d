"""Why a sign-in through OpenID Connect did not give a principal.

:class:`SignInRefused` and its kinds: the person (or whoever sent the browser back) gets no
access, and the audit log says why — each carries a stable ``reason`` and an
:meth:`~SignInRefused.audit_detail` with nothing secret in it (no code, token, verifier,
state or nonce). :class:`ProviderUnavailable` is not a refusal: the provider could not be
asked (down, or answering nonsense); the sign-in may be tried again.
"""

from __future__ import annotations

from typing import Any

from cairn.errors import CairnError

# Text the provider wrote (an error description) is kept this long in the audit log.
_PROVIDER_TEXT = 200


class OidcError(CairnError):
    code = "oidc_error"


class ProviderUnavailable(OidcError):
    """The provider's discovery document, keys or token endpoint could not be read."""

    code = "oidc_provider_unavailable"


class SignInRefused(OidcError):
    """No principal for this sign-in. ``subject``/``name``: who the provider said it was,
    once its ID token was verified (refusals after that point only)."""

    code = "sign_in_refused"
    reason = "refused"

    def __init__(self, message: str, *, subject: str | None = None, name: str | None = None):
        super().__init__(message)
        self.subject = subject
        self.name = name

    def audit_detail(self) -> dict[str, Any]:
        """What the audit entry of this refusal says."""
        detail: dict[str, Any] = {"reason": self.reason, "message": str(self)[:_PROVIDER_TEXT]}
        if self.subject is not None:
            detail["subject"] = self.subject
        return detail

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "reason": self.reason}

    def __reduce__(self) -> tuple[Any, ...]:
        # Every fact kept across a pickle, whatever the kind's own constructor takes.
        return (_rebuilt, (type(self), str(self), dict(self.__dict__)))


def _rebuilt(kind: type[SignInRefused], message: str, facts: dict[str, Any]) -> SignInRefused:
    error = kind.__new__(kind)
    Exception.__init__(error, message)
    error.__dict__.update(facts)
    return error


class StateMismatch(SignInRefused):
    """The callback's ``state`` is not the one this login began with: a forged or crossed
    callback (login CSRF), or a second tab's."""

    reason = "state_mismatch"


class LoginExpired(SignInRefused):
    """The login began too long ago (its state is no longer honoured)."""

    reason = "login_expired"


class ProviderRefused(SignInRefused):
    """The provider answered with an error: at the callback (``error=access_denied``), or
    at the token endpoint — a code used twice, a wrong PKCE verifier, a wrong redirect URL
    all come back as ``invalid_grant``; ``error`` is the provider's code."""

    reason = "provider_error"

    def __init__(self, error: str, description: str = "", *, at: str) -> None:
        self.error = error[:_PROVIDER_TEXT]
        self.description = description[:_PROVIDER_TEXT]
        self.at = at
        said = f": {self.description}" if self.description else ""
        super().__init__(f"the provider refused at its {at} endpoint: {self.error}{said}")

    def audit_detail(self) -> dict[str, Any]:
        return {**super().audit_detail(), "error": self.error, "at": self.at}


class InvalidToken(SignInRefused):
    """The ID token is malformed, lacks a required claim, or uses an algorithm not allowed."""

    reason = "invalid_token"


class BadSignature(InvalidToken):
    """The ID token's signature is not one of the provider's published keys'."""

    reason = "bad_signature"


class WrongIssuer(InvalidToken):
    reason = "wrong_issuer"


class WrongAudience(InvalidToken):
    """The ID token was issued to another client (or, with several audiences, not
    authorised for this one)."""

    reason = "wrong_audience"


class TokenExpired(InvalidToken):
    reason = "expired"


class NonceMismatch(InvalidToken):
    """The ID token's ``nonce`` is not this login's: a token replayed from another login."""

    reason = "nonce_mismatch"


class NoMappedGroup(SignInRefused):
    """A verified person in none of the groups ``CAIRN_OIDC_ROLES`` maps: no access."""

    reason = "no_mapped_group"


class SeveralNamespaces(SignInRefused):
    """A person whose groups grant roles in more than one namespace: a principal belongs to
    one, and cairn will not guess which."""

    reason = "several_namespaces"


class NoUsableName(SignInRefused):
    """The name claim is missing, unverified (``email_verified: false``), or not a valid
    principal name."""

    reason = "no_usable_name"


__all__ = [
    "BadSignature",
    "InvalidToken",
    "LoginExpired",
    "NoMappedGroup",
    "NoUsableName",
    "NonceMismatch",
    "OidcError",
    "ProviderRefused",
    "ProviderUnavailable",
    "SeveralNamespaces",
    "SignInRefused",
    "StateMismatch",
    "TokenExpired",
    "WrongAudience",
    "WrongIssuer",
]
