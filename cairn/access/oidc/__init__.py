"""Sign-in through OpenID Connect, for the console's teams: :class:`OidcSignIn`
(``begin`` → the provider's URL and the state to keep; ``finish`` → a verified person's
principal, or a typed refusal), built from the ``CAIRN_OIDC_*`` settings; and
:func:`record_sign_in`, its audit entry. See docs/console.md, "OpenID Connect sign-in".
"""

from cairn.access.oidc.audit import record_sign_in
from cairn.access.oidc.errors import (
    BadSignature,
    InvalidToken,
    LoginExpired,
    NoMappedGroup,
    NonceMismatch,
    NoUsableName,
    OidcError,
    ProviderRefused,
    ProviderUnavailable,
    SeveralNamespaces,
    SignInRefused,
    StateMismatch,
    TokenExpired,
    WrongAudience,
    WrongIssuer,
)
from cairn.access.oidc.flow import Begun, LoginState, OidcSignIn, SignedIn
from cairn.access.oidc.mapping import GroupRoles

__all__ = [
    # the flow
    "Begun",
    "GroupRoles",
    "LoginState",
    "OidcSignIn",
    "SignedIn",
    "record_sign_in",
    # why not
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
