"""The object-store contract on every backend: the filesystem, memory, and S3 (moto's
server standing in for it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.artifacts.stores import (
    FilesystemStore,
    MemoryStore,
    ObjectStore,
    S3Store,
    open_store,
)
from cairn.testing.contracts import ObjectStoreContract


class TestFilesystemStore(ObjectStoreContract):
    @pytest.fixture
    def objects(self, tmp_path: Path) -> ObjectStore:
        return FilesystemStore(tmp_path / "blobs")


class TestMemoryStore(ObjectStoreContract):
    @pytest.fixture
    def objects(self) -> ObjectStore:
        return MemoryStore("contract")


class TestS3Store(ObjectStoreContract):
    @pytest.fixture
    def objects(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectStore]:
        import boto3  # noqa: PLC0415 - the s3 extra
        from moto.server import ThreadedMotoServer  # noqa: PLC0415

        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.setenv(name, "testing")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            # moto keeps one world per process: a bucket of the test's own starts empty.
            bucket = f"contract-{uuid.uuid4().hex[:12]}"
            client.create_bucket(Bucket=bucket)
            store = open_store(f"s3://{bucket}/blobs?endpoint_url={endpoint}&region=us-east-1")
            yield store
            # Closed here, not whenever the collector gets to them: an unclosed socket's
            # warning then surfaces in whichever later test happens to collect it.
            client.close()
            assert isinstance(store, S3Store)
            store.client.close()
        finally:
            server.stop()
