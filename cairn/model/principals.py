"""Who acts: principals, their roles, and what each role may do.

A **principal** is whoever makes a request or a write: an API key (a service or a
person's token), a signed-in person (the console), or one of the non-person writers that
do not come through the API — the broker's submit tasks (``broker:<name>``), the CLI and
the Python client writing to the database directly (``db:<user>``), and cairn's own
processes (``system:<what>``: the scheduler's schedules, a parent run starting its
child). Every write records its principal as the **actor** (``<kind>:<name>``), derived
from the authenticated principal, never from what a request says about itself.

A principal belongs to one namespace and has one **role**; reading payloads — inputs,
state, outputs, signal payloads, model messages — is a permission of its own
(``payloads``), held or not by a principal of any role. The table (:data:`ROLE_PERMISSIONS`)
is the single source the API, the CLI and the console check; ``docs/access.md`` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class Role(StrEnum):
    VIEWER = "viewer"  # reads runs, histories and the fleet
    APPROVER = "approver"  # and decides the waits it may decide
    OPERATOR = "operator"  # and starts, stops, repairs and replays runs
    ADMIN = "admin"  # and registers and shares definitions, manages keys, reads the audit log


class Permission(StrEnum):
    READ = "read"  # runs, events, fleet views, schedules, definitions (without payloads)
    PAYLOADS = "payloads"  # inputs, state, outputs, signal payloads, model messages
    APPROVE = "approve"  # a wait's signals (bounded again by the wait's approvers:)
    SUBMIT = "submit"
    CANCEL = "cancel"
    RECOVER = "recover"  # settle a held node: recovery.retry / complete / fail
    FORK = "fork"
    ROLLBACK = "rollback"
    REPLAY = "replay"  # run a run's handlers again, isolated (replay, dry-run fork)
    RESOLVE = "resolve"  # record what really happened to a flagged effect
    BULK = "bulk"  # an action on every run a filter selects
    SCHEDULES = "schedules"  # add, pause, resume, delete, backfill schedules
    PAUSE = "pause"  # pause a workflow's new starts, or a queue
    # Register definitions into the namespace. Admin only: a definition names the code
    # the workers run (its handlers' import paths) and, as the newest version, what every
    # new run of the workflow — and of every namespace it is shared with — executes.
    REGISTER = "register"
    # Share a workflow with another namespace, revoke a share: it crosses the tenant
    # boundary, so it is an admin's too.
    SHARE = "share"
    RECONCILE = "reconcile"
    # Move runs in flight to another version of their workflow, or undo a move: it changes
    # what code those runs execute, as registering a definition does.
    MIGRATE = "migrate"
    KEYS = "keys"  # create, rotate, revoke API keys
    AUDIT = "audit"  # read and export the audit log


_VIEWER = frozenset({Permission.READ})
_APPROVER = _VIEWER | {Permission.APPROVE}
_OPERATOR = _APPROVER | {
    Permission.SUBMIT,
    Permission.CANCEL,
    Permission.RECOVER,
    Permission.FORK,
    Permission.ROLLBACK,
    Permission.REPLAY,
    Permission.RESOLVE,
    Permission.BULK,
    Permission.SCHEDULES,
    Permission.PAUSE,
}
_ADMIN = _OPERATOR | {
    Permission.REGISTER,
    Permission.MIGRATE,
    Permission.SHARE,
    Permission.RECONCILE,
    Permission.KEYS,
    Permission.AUDIT,
}

# What each role may do. PAYLOADS is in none: a principal holds it or not, whatever its
# role (an operator who repairs runs need not read what customers wrote).
ROLE_PERMISSIONS = MappingProxyType(
    {
        Role.VIEWER: _VIEWER,
        Role.APPROVER: _APPROVER,
        Role.OPERATOR: _OPERATOR,
        Role.ADMIN: _ADMIN,
    }
)


class PrincipalKind(StrEnum):
    KEY = "key"  # an API key
    PERSON = "person"  # signed in through the identity provider
    BROKER = "broker"  # the broker's submit tasks, as an admin configured them
    DB = "db"  # the CLI or the Python client, writing to the database directly
    SYSTEM = "system"  # cairn's own processes (a schedule, a parent run)

    @property
    def person(self) -> bool:
        """Whether it stands for someone who signed in (a key may be a person's too)."""
        return self in (PrincipalKind.KEY, PrincipalKind.PERSON)


@dataclass(frozen=True)
class Principal:
    """An authenticated principal. ``key_id``: the API key it presented, if any."""

    name: str
    namespace: str
    role: Role
    kind: PrincipalKind = PrincipalKind.KEY
    payloads: bool = False
    key_id: str | None = None

    @property
    def actor(self) -> str:
        """How writes and the audit log name it: ``<kind>:<name>``."""
        return f"{self.kind.value}:{self.name}"

    def may(self, permission: Permission) -> bool:
        if permission is Permission.PAYLOADS:
            return self.payloads
        return permission in ROLE_PERMISSIONS[self.role]


def system(what: str, namespace: str) -> Principal:
    """One of cairn's own processes acting in ``namespace`` (``system:<what>``)."""
    return Principal(what, namespace, Role.ADMIN, PrincipalKind.SYSTEM, payloads=True)
