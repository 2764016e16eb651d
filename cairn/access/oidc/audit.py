"""A sign-in's audit entry (action ``auth.oidc``): who signed in, with what role, from
where; or why not. A refusal of someone the provider vouched for (in no mapped group) is
recorded under ``person:<name>``; any other refusal — a forged or stale callback, a bad
token — has no principal, and is recorded as ``anonymous``, throttled per source and
reason as every such refusal is (:meth:`cairn.access.audit.Audit.refused_anonymous`)."""

from __future__ import annotations

import logging

from cairn.access.audit import NO_NAMESPACE, Audit, Entry
from cairn.access.oidc.errors import SignInRefused
from cairn.access.oidc.flow import SignedIn
from cairn.model.principals import PrincipalKind

log = logging.getLogger(__name__)

ACTION = "auth.oidc"


def record_sign_in(audit: Audit, outcome: SignedIn | SignInRefused, source: str | None) -> None:
    """Write the audit entry of a sign-in that ended in ``outcome``; ``source``: the
    client's address."""
    if isinstance(outcome, SignedIn):
        detail = {"issuer": outcome.issuer, "subject": outcome.subject}
        audit.record(Entry.by(outcome.principal, ACTION, "ok", source=source, detail=detail))
        return
    log.info("sign-in refused (%s) from %s: %s", outcome.reason, source, outcome)
    if outcome.name is None:
        audit.refused_anonymous(f"oidc: {outcome.reason}", source, 401)
        return
    person = PrincipalKind.PERSON.value
    audit.record(
        Entry(
            ACTION,
            "refused",
            NO_NAMESPACE,
            f"{person}:{outcome.name}",
            person,
            source=source,
            status=403,
            detail=outcome.audit_detail(),
        )
    )


__all__ = ["ACTION", "record_sign_in"]
