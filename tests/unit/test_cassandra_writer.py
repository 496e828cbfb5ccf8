"""Cassandra ingest's pure parts: a missing C++ driver, and the stack's TLS handed to it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from workbench.backends.registry import make_backend
from workbench.clients.cassandra import NativeTLS, stack_tls
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.stack.tls import ensure_certificates


def _settings(tmp_path: Path, **update) -> Settings:
    return Settings(_env_file=None, state_dir=tmp_path / "state", tls_dir=tmp_path / "tls", **update)


def test_ingest_without_the_driver_names_the_package_and_the_install_command(monkeypatch, tmp_path):
    backend = make_backend("cassandra", _settings(tmp_path), "d")
    monkeypatch.setitem(sys.modules, "acsylla", None)  # import acsylla -> ImportError
    with pytest.raises(WorkbenchError) as error:
        backend.write(iter([]), lambda n, size: None)
    assert str(error.value) == ("Cassandra ingest needs the package acsylla (a C++ Cassandra driver): "
                                "pip install acsylla")


def test_the_stack_tls_trusts_its_ca_and_checks_the_servers_identity(tmp_path):
    secure = _settings(tmp_path, tls=True)
    with pytest.raises(WorkbenchError, match=r"the CA file \S+ does not exist"):
        stack_tls(secure)
    ensure_certificates(secure)
    assert stack_tls(secure) == NativeTLS(str(secure.ca_file()), check_identity=True)
    assert stack_tls(_settings(tmp_path, tls=False)) is None
    assert "s3cr3t" not in repr(NativeTLS("ca.pem", own_key_password="s3cr3t"))
