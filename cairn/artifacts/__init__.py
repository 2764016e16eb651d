"""Artifacts with provenance: what a run produces that is too large for its state.

A handler puts content (``ctx.artifacts.put("draft", text, model="gpt-x")``); the bytes
go to an object store under their sha256 (:mod:`cairn.artifacts.stores`), a row in the
database registers them as the next version of that name in the run, with where they
came from (:mod:`cairn.store.artifacts`), and the handler gets back a small reference.
The references a step created ride on its result into the run state
(``RunState.artifacts``: name -> latest reference): snapshots hold references, never
the content. :mod:`cairn.artifacts.cleanup` removes orphan blobs and expired artifacts.

See ``docs/artifacts.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from cairn.artifacts.stores import ObjectStore, digest, open_store
from cairn.errors import ArtifactCorrupt, ArtifactError, ArtifactNotFound, InvalidInput
from cairn.model.payloads import storable_json, storable_text
from cairn.store.artifacts import ArtifactInfo, ArtifactRegistry, Provenance

if TYPE_CHECKING:
    from cairn.config import Settings
    from cairn.store.sql import Store

NAME_MAX = 200
# Provenance travels in a database row, not in a blob: keep it small.
META_LIMIT_BYTES = 65_536
# Keys of ``**meta`` with columns of their own; everything else is kept as ``meta``.
PROVENANCE_KEYS = ("call_id", "model", "tool", "params")


class Artifacts:
    """``ctx.artifacts``: put and read the run's artifacts from a handler.

    Built for one execution (run, node, iteration, attempt, phase), which every put
    records as its provenance. The object store is opened on first use, so a step that
    puts nothing costs nothing.
    """

    def __init__(
        self,
        registry: ArtifactRegistry | None,
        objects: ObjectStore | Callable[[], ObjectStore] | None,
        *,
        run_id: str,
        node: str,
        iteration: int,
        attempt: int,
        phase: str = "run",
    ) -> None:
        self._registry = registry
        self._objects = objects
        self.run_id = run_id
        self.node = node
        self.iteration = iteration
        self.attempt = attempt
        self.phase = phase
        self._puts = 0
        self._created: dict[str, dict[str, Any]] = {}

    @classmethod
    def for_step(
        cls,
        store: Store,
        settings: Settings,
        *,
        run_id: str,
        node: str,
        iteration: int,
        attempt: int,
        phase: str = "run",
    ) -> Artifacts:
        """The artifacts of one execution, on the configured database and object store."""
        return cls(
            ArtifactRegistry(store),
            # Resolved on first use: most steps put nothing, and the hot path stays as it was.
            lambda: open_store(settings.effective_artifacts_url),
            run_id=run_id,
            node=node,
            iteration=iteration,
            attempt=attempt,
            phase=phase,
        )

    @classmethod
    def unavailable(cls, run_id: str = "", node: str = "") -> Artifacts:
        """For a context built without a store (tests of a handler): every use raises."""
        return cls(None, None, run_id=run_id, node=node, iteration=0, attempt=0)

    @property
    def objects(self) -> ObjectStore:
        """The object store the content goes to (:class:`ArtifactError` if none is
        configured here)."""
        if self._objects is None:
            raise ArtifactError("no artifact store is configured for this context")
        if not isinstance(self._objects, ObjectStore):
            self._objects = self._objects()
        return self._objects

    @property
    def registry(self) -> ArtifactRegistry:
        """Where the artifacts' registrations are kept (:class:`ArtifactError` if none is
        configured here)."""
        if self._registry is None:
            raise ArtifactError("no artifact store is configured for this context")
        return self._registry

    def put(
        self, name: str, data: bytes | bytearray | memoryview | str, **meta: Any
    ) -> dict[str, Any]:
        """Store ``data`` as the next version of ``name`` in this run; its reference
        (``name``, ``version``, ``sha256``, ``size``, ``uri``: small, JSON).

        ``meta`` is provenance: ``model=``, ``tool=``, ``params={...}`` and ``call_id=``
        (the model's or tool's call id; by default one is derived from the execution)
        have columns of their own, anything else JSON is kept too. A ``str`` is stored
        as UTF-8.

        Putting the same content under the same name again from the same node visit —
        a retry, a recovery, or the same handler twice — returns the registration made
        the first time (its provenance included), not a new version.
        """
        content = _content(data)
        _check_name(name)
        provenance = self._provenance(meta)
        registry, objects = self.registry, self.objects
        sha256 = digest(content)
        info = registry.find(self.run_id, self.node, self.iteration, name, sha256)
        # Write first, register second: a crash in between leaves an orphan blob (cleaned
        # up later), never a row without content. Registered before (a retry), the write
        # is a no-op — or puts back a blob lost behind cairn's back.
        objects.ensure(sha256, content)
        if info is None:
            info = registry.register(
                name=name,
                sha256=sha256,
                size=len(content),
                uri=objects.uri(sha256),
                provenance=provenance,
                ensure_blob=lambda: objects.ensure(sha256, content),
            )
        ref = info.ref()
        kept = self._created.get(name)
        if kept is None or kept["version"] <= ref["version"]:
            self._created[name] = ref
        return ref

    def get(self, name: str, version: int | None = None, *, run_id: str | None = None) -> bytes:
        """The content of a version of ``name`` (the run's latest by default; another
        run's with ``run_id``)."""
        info = self.info(name, version, run_id=run_id)
        return self.objects.read(info.sha256)

    def text(self, name: str, version: int | None = None, *, run_id: str | None = None) -> str:
        """:meth:`get`, decoded from UTF-8."""
        return self.get(name, version, run_id=run_id).decode("utf-8")

    # -- for async handlers: the same, their I/O off the event loop ----------------------

    async def put_async(
        self, name: str, data: bytes | bytearray | memoryview | str, **meta: Any
    ) -> dict[str, Any]:
        """:meth:`put`, awaited."""
        return await asyncio.to_thread(self.put, name, data, **meta)

    async def get_async(
        self, name: str, version: int | None = None, *, run_id: str | None = None
    ) -> bytes:
        """:meth:`get`, awaited."""
        return await asyncio.to_thread(self.get, name, version, run_id=run_id)

    async def text_async(
        self, name: str, version: int | None = None, *, run_id: str | None = None
    ) -> str:
        """:meth:`text`, awaited."""
        return (await self.get_async(name, version, run_id=run_id)).decode("utf-8")

    def info(
        self, name: str, version: int | None = None, *, run_id: str | None = None
    ) -> ArtifactInfo:
        """A version's registration with its provenance (the latest by default)."""
        return self.registry.get(run_id or self.run_id, name, version)

    def versions(self, name: str | None = None, *, run_id: str | None = None) -> list[ArtifactInfo]:
        """Every version in the run (of ``name`` only, if given), by name and version."""
        return self.registry.versions(run_id or self.run_id, name)

    def created(self) -> dict[str, dict[str, Any]]:
        """What this execution put: name -> the latest reference. It rides on the step's
        result into ``RunState.artifacts``."""
        return dict(self._created)

    def _provenance(self, meta: Mapping[str, Any]) -> Provenance:
        rest = {key: value for key, value in meta.items() if key not in PROVENANCE_KEYS}
        for key in ("call_id", "model", "tool"):
            value = meta.get(key)
            if value is not None and not (isinstance(value, str) and storable_text(value)):
                raise ArtifactError(f"artifact {key}= is a string, not {value!r}")
            if value is not None and len(value) > NAME_MAX:
                raise ArtifactError(f"artifact {key}= is longer than {NAME_MAX} characters")
        params = meta.get("params")
        if params is not None and not isinstance(params, Mapping):
            raise ArtifactError(f"artifact params= is a mapping, not {type(params).__name__}")
        _check_json({"params": params, "meta": rest})
        self._puts += 1
        call_id = meta.get("call_id") or (
            f"{self.node}#{self.iteration}.{self.attempt}/{self.phase}:{self._puts}"
        )
        return Provenance(
            run_id=self.run_id,
            node=self.node,
            iteration=self.iteration,
            attempt=self.attempt,
            phase=self.phase,
            call_id=call_id,
            model=meta.get("model"),
            tool=meta.get("tool"),
            params=dict(params) if params is not None else None,
            meta=rest or None,
        )


def _content(data: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise ArtifactError(
        f"artifact content is bytes or str, not {type(data).__name__} "
        "(serialise it first, e.g. json.dumps(...))"
    )


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > NAME_MAX or not storable_text(name):
        raise ArtifactError(
            f"an artifact name is a non-empty string of at most {NAME_MAX} characters, not {name!r}"
        )


def _check_json(value: Mapping[str, Any]) -> None:
    try:
        storable_json(value, what="artifact provenance", limit_bytes=META_LIMIT_BYTES)
    except InvalidInput as exc:
        raise ArtifactError(f"{exc} (put large parameters in an artifact of their own)") from exc


__all__ = [
    "ArtifactCorrupt",
    "ArtifactError",
    "ArtifactInfo",
    "ArtifactNotFound",
    "ArtifactRegistry",
    "Artifacts",
    "ObjectStore",
    "Provenance",
    "open_store",
]
