"""Which workflow a name means: ``namespace/workflow@version``.

Definitions belong to a namespace, so a name says which one it means. Two forms:

- **What a person or a definition writes** (:class:`WorkflowName`): ``checkout``,
  ``checkout@3``, ``acme/checkout``, ``acme/checkout@3``. A bare name means the
  namespace of whoever says it — the caller of submit, a schedule's namespace, the
  namespace that owns the definition naming a child — and then a workflow another
  namespace shares with it (docs/access.md#namespaces).
- **What cairn stores and sends** (:func:`qualified`): ``checkout`` for the ``default``
  namespace, ``acme/checkout`` for any other. A node message's workflow and a Celery
  task's name (``acme/checkout.charge``) use it, so two namespaces' ``checkout.charge``
  never collide, and everything the ``default`` namespace had before namespaces keeps
  its name (a deployed worker or a Flower filter sees no change).

Neither form is ambiguous: a workflow's name has no ``/`` and no ``@``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cairn.errors import InvalidInput

DEFAULT_NAMESPACE = "default"
# A namespace's name: as API keys and CAIRN_BROKER_SUBMIT spell it.
NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# A workflow's name: as a definition's ``name`` is checked when it is loaded.
WORKFLOW = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,199}")
_WRITTEN = re.compile(r"(?:(?P<namespace>[^/@]+)/)?(?P<name>[^/@]+)(?:@(?P<version>[0-9]{1,10}))?")
MAX_VERSION = 2**31 - 1  # the column's integer


class BadWorkflowName(InvalidInput):
    code = "bad_workflow_name"


@dataclass(frozen=True)
class WorkflowName:
    """A workflow as written: its name, the namespace it names (None: the speaker's),
    and the version it pins (None: the newest it may see)."""

    name: str
    namespace: str | None = None
    version: int | None = None

    @classmethod
    def parse(cls, text: str) -> WorkflowName:
        """``[namespace/]workflow[@version]``; :class:`BadWorkflowName` for anything else."""
        found = _WRITTEN.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            raise BadWorkflowName(
                f"a workflow is named 'workflow', 'workflow@version' or "
                f"'namespace/workflow@version', not {text!r}"
            )
        namespace, name, version = found.group("namespace", "name", "version")
        if namespace is not None:
            check_namespace(namespace)
        if not WORKFLOW.fullmatch(name):
            raise BadWorkflowName(
                f"{name!r} is not a workflow's name (a letter or '_', then letters, digits, "
                "'_', '.', '-')"
            )
        number = None if version is None else int(version)
        if number is not None and not 1 <= number <= MAX_VERSION:
            raise BadWorkflowName(f"a workflow's version is 1 or more, not {version}")
        return cls(name, namespace, number)

    def pinned(self, version: int | None) -> WorkflowName:
        """This name with ``version`` too (given separately, as the API's ``version``
        field); :class:`BadWorkflowName` if the two disagree."""
        if version is None or version == self.version:
            return self
        if self.version is not None:
            raise BadWorkflowName(
                f"{self} pins version {self.version}, and version {version} is asked too"
            )
        return WorkflowName(self.name, self.namespace, version)

    def owner(self, speaker: str) -> str:
        """The namespace it names, said by ``speaker``: its own, unless it names one."""
        return self.namespace if self.namespace is not None else speaker

    def __str__(self) -> str:
        text = self.name if self.namespace is None else f"{self.namespace}/{self.name}"
        return text if self.version is None else f"{text}@{self.version}"


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        raise BadWorkflowName(
            "a namespace is 1 to 100 letters, digits, '.', '_', '-' (starting with a letter "
            f"or digit), not {namespace!r}"
        )
    return namespace


def qualified(namespace: str, name: str) -> str:
    """How cairn stores and sends workflow ``name`` of ``namespace`` (see the module)."""
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}/{name}"


def unqualified(stored: str) -> tuple[str, str]:
    """(namespace, name) of a workflow as :func:`qualified` wrote it."""
    namespace, slash, name = stored.partition("/")
    return (namespace, name) if slash else (DEFAULT_NAMESPACE, stored)
