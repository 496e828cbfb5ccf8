"""What the credential tests share (tests/ is on sys.path through its conftest)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from workbench.config import ensure_credentials


def check_first_credentials(env: Path) -> str:
    """`ensure_credentials` on an .env that holds one other setting and is world-readable: it writes the logins,
    makes the file private and keeps the setting. Returns the file's text."""
    env.write_text("WORKBENCH_TIMEOUT_S=5\n")
    env.chmod(0o644)
    assert ensure_credentials(env) is True
    assert stat.S_IMODE(os.stat(env).st_mode) == 0o600
    written = env.read_text()
    assert "WORKBENCH_TIMEOUT_S=5" in written
    return written
