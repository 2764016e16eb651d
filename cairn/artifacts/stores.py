"""Object stores: where artifact content lives, addressed by its sha256.

A blob's key is derived from its content (``sha256/ab/cd/abcd...``), so writing the same
bytes twice stores them once, a write can be repeated after a crash without harm, and a
blob never changes once written. PostgreSQL holds everything else about an artifact (see
:mod:`cairn.store.artifacts`); a blob that no row references is an orphan, which
:mod:`cairn.artifacts.cleanup` removes after a grace period.

Three backends behind one interface: the local filesystem (the default, under
``CAIRN_HOME``), S3-compatible services through boto3 (``pip install 'cairn[s3]'``), and
process memory (tests, and a twin for the other two).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from cairn.errors import ArtifactCorrupt, ArtifactError, ArtifactNotFound, ConfigError

SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A write in progress on the filesystem: renamed into place once complete.
PARTIAL_SUFFIX = ".partial"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_key(sha256: str) -> str:
    """Where a blob lives below a store's root. Two levels of fan-out keep directories
    small on filesystems; S3 uses the same layout so that a tree can be synced to a
    bucket as it is."""
    if not SHA256.match(sha256):
        raise ArtifactError(f"not a sha256 digest: {sha256!r}")
    return f"sha256/{sha256[:2]}/{sha256[2:4]}/{sha256}"


@dataclass(frozen=True)
class Blob:
    """A stored blob as a listing sees it: ``modified`` in seconds since the epoch."""

    sha256: str
    size: int
    modified: float


class ObjectStore(ABC):
    """Content-addressed blobs. Every operation is idempotent: writing a blob that
    exists, or deleting one that does not, is not an error."""

    url: str

    @abstractmethod
    def uri(self, sha256: str) -> str:
        """Where the blob is, for people and tools (``file://...``, ``s3://...``)."""

    @abstractmethod
    def exists(self, sha256: str) -> bool: ...

    @abstractmethod
    def _write(self, sha256: str, data: bytes) -> None:
        """Store ``data`` under its digest, atomically: readers see all of it or none."""

    @abstractmethod
    def _read(self, sha256: str) -> bytes:
        """The blob's bytes; :class:`ArtifactNotFound` if there is none."""

    @abstractmethod
    def delete(self, sha256: str) -> None: ...

    @abstractmethod
    def blobs(self) -> Iterator[Blob]:
        """Every complete blob in the store, in no particular order."""

    def sweep_partial(self, older_than: float) -> int:
        """Remove writes left incomplete by a crash, started before ``older_than``
        (seconds since the epoch); how many. Stores whose writes are atomic have none."""
        return 0

    def ensure(self, sha256: str, data: bytes) -> bool:
        """Make sure the blob is stored; True if it had to be written."""
        if self.exists(sha256):
            return False
        self._write(sha256, data)
        return True

    def put(self, data: bytes) -> str:
        """Store ``data``; its sha256."""
        sha256 = digest(data)
        self.ensure(sha256, data)
        return sha256

    def read(self, sha256: str) -> bytes:
        """The blob's bytes, checked against its digest: a blob changed or truncated
        behind cairn's back is an error, not silently different content."""
        data = self._read(sha256)
        if digest(data) != sha256:
            raise ArtifactCorrupt(f"blob {self.uri(sha256)} does not match its sha256")
        return data


class FilesystemStore(ObjectStore):
    """Blobs as files under ``root``. A write goes to a partial file in the blob's own
    directory, is flushed to disk, and is renamed into place: a reader (or a crash) never
    sees half a blob, and the rename is durable before the artifact is registered."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.url = self.root.as_uri()

    def _path(self, sha256: str) -> Path:
        return self.root / blob_key(sha256)

    def uri(self, sha256: str) -> str:
        return self._path(sha256).as_uri()

    def exists(self, sha256: str) -> bool:
        return self._path(sha256).is_file()

    def _write(self, sha256: str, data: bytes) -> None:
        path = self._path(sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(
            dir=path.parent, prefix=f".{sha256[:16]}.", suffix=PARTIAL_SUFFIX
        )
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            raise
        _fsync_directory(path.parent)

    def _read(self, sha256: str) -> bytes:
        try:
            return self._path(sha256).read_bytes()
        except FileNotFoundError:
            raise ArtifactNotFound(f"no blob {self.uri(sha256)}") from None

    def delete(self, sha256: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(sha256).unlink()

    def blobs(self) -> Iterator[Blob]:
        for path in self._files():
            if SHA256.match(path.name):
                with contextlib.suppress(FileNotFoundError):  # deleted while listing
                    stat = path.stat()
                    yield Blob(path.name, stat.st_size, stat.st_mtime)

    def sweep_partial(self, older_than: float) -> int:
        swept = 0
        for path in self._files():
            if path.name.endswith(PARTIAL_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_mtime < older_than:
                        path.unlink()
                        swept += 1
        return swept

    def _files(self) -> Iterator[Path]:
        top = self.root / "sha256"
        for directory, _dirs, names in os.walk(top):
            for name in names:
                yield Path(directory) / name


def _fsync_directory(path: Path) -> None:
    """Make a rename in ``path`` durable (POSIX; a no-op where directories cannot be
    opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MemoryStore(ObjectStore):
    """Blobs in this process's memory: the twin of the other stores for tests. ``clock``
    stamps each write (tests advance it instead of sleeping)."""

    def __init__(self, name: str = "", clock: Callable[[], float] = time.time) -> None:
        self.url = f"memory://{name}"
        self._clock = clock
        self._blobs: dict[str, tuple[bytes, float]] = {}
        self._lock = threading.Lock()

    def uri(self, sha256: str) -> str:
        return f"{self.url}/{blob_key(sha256)}"

    def exists(self, sha256: str) -> bool:
        return sha256 in self._blobs

    def _write(self, sha256: str, data: bytes) -> None:
        with self._lock:
            self._blobs[sha256] = (bytes(data), self._clock())

    def _read(self, sha256: str) -> bytes:
        entry = self._blobs.get(sha256)
        if entry is None:
            raise ArtifactNotFound(f"no blob {self.uri(sha256)}")
        return entry[0]

    def delete(self, sha256: str) -> None:
        with self._lock:
            self._blobs.pop(sha256, None)

    def blobs(self) -> Iterator[Blob]:
        with self._lock:
            entries = list(self._blobs.items())
        for sha256, (data, modified) in entries:
            yield Blob(sha256, len(data), modified)


class S3Store(ObjectStore):
    """Blobs as objects in an S3 bucket (AWS, MinIO, Ceph, ...), below ``prefix``.

    ``PutObject`` is atomic, so there are no partial writes to sweep. Credentials and
    region come from boto3's usual chain (environment, config files, instance roles);
    ``endpoint_url`` points it at an S3-compatible service.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        if client is None:
            try:
                import boto3  # noqa: PLC0415 - an optional extra
            except ImportError as exc:
                raise ConfigError(
                    "an s3:// artifact store needs boto3: pip install 'cairn[s3]'"
                ) from exc
            client = boto3.client("s3", endpoint_url=endpoint_url, region_name=region)
        self.client = client

    def _key(self, sha256: str) -> str:
        return f"{self.prefix}{blob_key(sha256)}"

    def uri(self, sha256: str) -> str:
        return f"s3://{self.bucket}/{self._key(sha256)}"

    def exists(self, sha256: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(sha256))
        except Exception as exc:
            if _s3_missing(exc):
                return False
            raise
        return True

    def _write(self, sha256: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(sha256), Body=data)

    def _read(self, sha256: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(sha256))
        except Exception as exc:
            if _s3_missing(exc):
                raise ArtifactNotFound(f"no blob {self.uri(sha256)}") from None
            raise
        body: bytes = response["Body"].read()
        return body

    def delete(self, sha256: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(sha256))

    def blobs(self) -> Iterator[Blob]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}sha256/"
        )
        for page in pages:
            for entry in page.get("Contents", ()):
                name = entry["Key"].rsplit("/", 1)[-1]
                if SHA256.match(name):
                    yield Blob(name, int(entry["Size"]), entry["LastModified"].timestamp())


def _s3_missing(exc: Exception) -> bool:
    """A botocore ClientError saying the object is not there (recognised by shape, so
    that this module imports without boto3)."""
    error = getattr(exc, "response", None)
    if not isinstance(error, dict):
        return False
    code = str(error.get("Error", {}).get("Code", ""))
    return code in {"404", "NoSuchKey", "NotFound"}


_memory_stores: dict[str, MemoryStore] = {}
_memory_lock = threading.Lock()


def open_store(url: str) -> ObjectStore:
    """The object store named by ``url``; one instance per URL and process (an S3 client
    costs tens of milliseconds to build, and is safe to share between threads).

    - ``file:///var/lib/cairn/artifacts`` or a plain path: the local filesystem;
    - ``s3://bucket/prefix?endpoint_url=http://minio:9000&region=eu-west-1``: S3;
    - ``memory://name``: this process's memory (tests).
    """
    if url.startswith("memory:"):
        with _memory_lock:
            name = url.removeprefix("memory:").strip("/")
            return _memory_stores.setdefault(name, MemoryStore(name))
    return _open_cached(url)


@functools.lru_cache(maxsize=16)
def _open_cached(url: str) -> ObjectStore:
    parts = urlsplit(url)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"artifact store {url!r}: s3:// needs a bucket")
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        unknown = set(options) - {"endpoint_url", "region"}
        if unknown:
            raise ConfigError(
                f"artifact store {url!r}: unknown option(s) {sorted(unknown)}; "
                "known: endpoint_url, region"
            )
        return S3Store(
            parts.netloc,
            parts.path,
            endpoint_url=options.get("endpoint_url"),
            region=options.get("region"),
        )
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"artifact store {url!r}: a file:// URL names a local path")
        return FilesystemStore(unquote(parts.path))
    if parts.scheme == "":  # a plain path
        return FilesystemStore(url)
    raise ConfigError(
        f"artifact store {url!r}: unknown scheme {parts.scheme!r}; use file://, s3:// or memory://"
    )


__all__ = [
    "Blob",
    "FilesystemStore",
    "MemoryStore",
    "ObjectStore",
    "S3Store",
    "blob_key",
    "digest",
    "open_store",
]
