"""Who may do what: authenticating a request's API key into a
:class:`~cairn.model.principals.Principal` (:mod:`cairn.access.authenticate`), minting and
revoking keys (:mod:`cairn.access.keys`), and the audit log every privileged action —
refusals included — is written to (:mod:`cairn.access.audit`). What each role may do is
one table, :data:`cairn.model.principals.ROLE_PERMISSIONS`. See docs/access.md.
"""

from cairn.access.audit import Audit
from cairn.access.authenticate import Authenticator, Forbidden, Unauthorized
from cairn.access.keys import KeyManager, MintedKey

__all__ = ["Audit", "Authenticator", "Forbidden", "KeyManager", "MintedKey", "Unauthorized"]
