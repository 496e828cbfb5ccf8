"""Fixtures the services tests share (the stack itself is tests/conftest.py's)."""

from __future__ import annotations

import pytest

from workbench.clients import cassandra_session


@pytest.fixture(scope="module")
def settings(stack, tmp_path_factory):
    """The stack's settings with a private state_dir (catalog, local manifests and fs datasets land there); a
    module with settings of its own defines its own `settings`."""
    return stack.model_copy(update={"state_dir": tmp_path_factory.mktemp("state")})


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
