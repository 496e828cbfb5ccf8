"""Shared fixtures. Tests marked `services` talk to the real servers of the local stack.

The stack is brought up once per session if it is not already healthy; a service that cannot start
fails those tests (it never skips them), so a green run means the real systems answered.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from workbench.config import Settings, ensure_credentials

# CI=true turns a skip into a failure (tests/skip_policy.py)
pytest_plugins = ["skip_policy"]


def _has_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU (none found by nvidia-smi)")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def stack() -> Settings:
    """Settings of a healthy local stack (started here if needed)."""
    from workbench.stack import status, up

    ensure_credentials()
    settings = Settings()
    if settings.stack == "local":
        rows = status(settings)
        if not all(r.healthy for r in rows):
            rows = up(settings)
    else:
        rows = status(settings)
    broken = [f"{r.service}: {r.detail}" for r in rows if not r.healthy]
    if broken:
        pytest.fail("stack not healthy: " + "; ".join(broken), pytrace=False)
    return settings


@pytest.fixture
def settings(tmp_path) -> Settings:
    """Settings of no stack (local files only): a private state_dir, no S3 login. tests/services/conftest.py
    gives its tests the stack's settings instead."""
    return Settings(state_dir=tmp_path / "state", s3_access_key=None, s3_secret_key=None)


@pytest.fixture
def unique() -> str:
    """A short unique name, so tests never see each other's keyspaces, buckets or caches."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def tf():
    """TensorFlow imported the workbench's way (triton first: workbench.tf_import), so that torchvision still
    loads later in this process; the test is skipped where TensorFlow is not installed."""
    from workbench.tf_import import tensorflow

    try:
        return tensorflow()
    except ImportError:
        pytest.skip("needs tensorflow")
