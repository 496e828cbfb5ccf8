"""`workbench_native`, our Rust extension (``native/``): the one place that imports it.

Why an extension of our own: the workbench's hot paths made one blocking Python call per object (an S3 GET, a
file read), and on a small machine those calls, not the storage, set the pace (`s3_batch`, `loaders.fs.read_many`).
Without it everything still works, on the slower paths, after one warning that says how to install it.
"""

from __future__ import annotations

import warnings
from typing import Any

INSTALL_HINT = "`.venv/bin/pip install ./native` (needs cargo; `make venv` does it)"

_warned: set[str] = set()


def load_extension(slower: str) -> Any | None:
    """The `workbench_native` module, or None with one warning per `slower` (what then runs slower) when it is
    not installed."""
    try:
        import workbench_native
    except ImportError:
        if slower not in _warned:
            _warned.add(slower)
            warnings.warn(f"workbench_native is not installed: {slower} (slower, more CPU); install it with "
                          f"{INSTALL_HINT}", RuntimeWarning, stacklevel=3)
        return None
    return workbench_native
