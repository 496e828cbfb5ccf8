"""Fixtures the services tests share (the stack itself is tests/conftest.py's)."""

from __future__ import annotations

import uuid

import pytest

from workbench.clients import cassandra_session
from workbench.storage import BotoS3Store, S3Store


@pytest.fixture(scope="module")
def settings(stack, tmp_path_factory):
    """The stack's settings with a private state_dir (catalog, local manifests and fs datasets land there); a
    module with settings of its own defines its own `settings`."""
    return stack.model_copy(update={"state_dir": tmp_path_factory.mktemp("state")})


@pytest.fixture(scope="module")
def scratch_bucket(stack):
    """A bucket of the module's own in the stack's MinIO: emptied and deleted at the end."""
    name = f"wbt-{uuid.uuid4().hex[:12]}"
    BotoS3Store(stack, name).ensure_bucket(True)
    yield name
    store = S3Store(stack, name)
    store.delete(k for k, _ in store.list())
    store.client.delete_bucket(Bucket=name)


@pytest.fixture
def keyspaces(stack):
    """Keyspaces a test creates: dropped afterwards whatever happens."""
    created: list[str] = []
    yield created
    with cassandra_session(stack) as session:
        for keyspace in created:
            session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")


@pytest.fixture(scope="module")
def torch_two_threads():
    """Torch's intra-op threads at 2 for a module (this machine's cores), restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)
