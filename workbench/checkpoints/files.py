"""Where a training run writes its checkpoint and event files: any fsspec URL, ``ignite://`` included.

``ignite://CACHE/path`` goes to the workbench's Ignite (the settings' nodes, login, TLS, client certificate)
through `workbench.storage.ignite_fs`; other URLs (``file://``, local paths, ``s3://`` with its own
storage options in the environment) through fsspec as they are.
"""

from __future__ import annotations

from typing import IO, Any

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.storage.ignite_fs import IgniteFileSystem


def open_url(url: str, mode: str = "rb", settings: Settings | None = None) -> IO[Any]:
    """A file object at `url`. Written files appear when closed; used as a ``with`` block, an ``ignite://``
    writer drops what it wrote if the block raises."""
    if not url:
        raise WorkbenchError("an empty URL names no file")
    if url.startswith("ignite://"):
        return IgniteFileSystem(settings or Settings()).open(url, mode)
    import fsspec

    try:
        return fsspec.open(url, mode, auto_mkdir="w" in mode).open()
    except (ValueError, ImportError) as exc:  # an unknown protocol, or one whose package is missing
        raise WorkbenchError(f"cannot open {url}: {exc}") from None


def join_url(base: str, name: str) -> str:
    """`name` inside the directory URL `base`."""
    return f"{base.rstrip('/')}/{name}"
