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


def url_fs(url: str, settings: Settings | None = None) -> tuple[Any, str]:
    """(fsspec file system, path in it) of `url`, resolved as `open_url` resolves it (listing a directory URL)."""
    if url.startswith("ignite://"):
        fs = IgniteFileSystem(settings or Settings())
        return fs, fs._strip_protocol(url)
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except (ValueError, ImportError) as exc:
        raise WorkbenchError(f"cannot open {url}: {exc}") from None


def check_url(url: str, flag: str, file: bool = True) -> str:
    """`url` when it can name a file (`file`) or a directory of files; else one line naming `flag` and the fix.

    Why before training: an ``ignite://`` URL without a cache or file would otherwise fail only when the
    run writes its outputs, after all the work."""
    if not url:
        raise WorkbenchError(f"{flag} is empty: give a URL (ignite://CACHE/path, file://, s3://...)")
    if url.startswith("ignite://"):
        try:
            cache, key = IgniteFileSystem.split(url)
        except WorkbenchError as exc:
            raise WorkbenchError(f"{flag} {url}: {exc}") from None
        if file and not key:
            raise WorkbenchError(f"{flag} {url} names Ignite cache {cache} but no file in it: use "
                                 f"ignite://{cache}/path/to/file")
    return url


def join_url(base: str, name: str) -> str:
    """`name` inside the directory URL `base`."""
    return f"{base.rstrip('/')}/{name}"
