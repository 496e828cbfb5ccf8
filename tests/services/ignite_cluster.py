"""A private Ignite cluster for the cluster tests: its own loopback addresses (127.0.0.21, .22, ...), state folder
and login, beside the main stack (127.0.0.1) and never touching it."""

from __future__ import annotations

import secrets
from pathlib import Path

from pydantic import SecretStr

from workbench.config import Settings
from workbench.stack.manager import process_of, select

HOST = "127.0.0.21"  # node k on 127.0.0.(21+k): ports are per address, so the usual ones are free here


def cluster_settings(root: Path, nodes: int = 2, **more) -> Settings:
    return Settings().model_copy(update={
        "stack": "local", "host": HOST, "state_dir": root, "ignite_nodes": nodes, "ignite_backups": 1,
        "ignite_persistence": False, "ignite_addresses": [], "tls": False, "dev_mode": False, "timeout_s": 10.0,
        "ignite_username": "workbench", "ignite_password": SecretStr(secrets.token_urlsafe(24)), **more})


def kill(settings: Settings, node: str) -> None:
    """SIGKILL one node at once, as a crash would."""
    process_of(select(settings, [node])[0]).kill()
