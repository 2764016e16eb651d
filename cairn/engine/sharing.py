"""Sharing a namespace's workflow with another namespace, and taking it back.

A share lets the grantee namespace see the workflow — list it, read its definition — and
start runs of it: every version (registered or to come), or one. Those runs are the
grantee's (its keys read, signal and cancel them) and execute the owner's definition;
the run records whose (``runs.workflow_namespace``). Revoking stops new starts,
schedules' ticks included; runs already started go on, on the definition they pinned.
"""

from __future__ import annotations

from dataclasses import dataclass

from cairn.errors import InvalidInput, ShareNotFound, UnknownWorkflow
from cairn.model.workflow_names import check_namespace
from cairn.store.definitions import ShareRecord
from cairn.store.sql import Store


@dataclass
class Sharing:
    store: Store

    def share(
        self, owner: str, workflow: str, grantee: str, version: int | None, *, by: str
    ) -> tuple[ShareRecord, bool]:
        """Share ``owner``'s ``workflow`` (``version``; None: every version) with
        ``grantee``; the share, and whether it is new (sharing twice is one share).
        :class:`UnknownWorkflow` unless ``owner`` registered it (that version)."""
        check_namespace(grantee)
        if grantee == owner:
            raise InvalidInput(f"namespace {owner!r} sees its own workflows already")
        with self.store.transaction() as tx:
            found, _spec, _format = tx.workflow_spec(owner, workflow, version)
            if not found:
                which = workflow if version is None else f"{workflow}@{version}"
                raise UnknownWorkflow(f"namespace {owner!r} has no workflow {which}")
            created = tx.share_workflow(owner, workflow, grantee, version, by)
            shares = tx.shares_of(owner, workflow)
        share = next(s for s in shares if (s.grantee, s.version) == (grantee, version))
        return share, created

    def revoke(self, owner: str, workflow: str, grantee: str, version: int | None) -> None:
        """Take a share back; :class:`ShareNotFound` if there is no such share (a share of
        every version and a share of one version are two shares, revoked apart)."""
        with self.store.transaction() as tx:
            if not tx.unshare_workflow(owner, workflow, grantee, version):
                which = "every version" if version is None else f"version {version}"
                raise ShareNotFound(
                    f"namespace {owner!r} does not share {workflow} ({which}) with {grantee!r}"
                )

    def shares(self, owner: str, workflow: str | None = None) -> list[ShareRecord]:
        """What ``owner`` shares (of ``workflow``), with whom."""
        with self.store.reading() as tx:
            return tx.shares_of(owner, workflow)
