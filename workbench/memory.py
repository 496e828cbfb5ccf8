"""glibc malloc thresholds for a process that reads big buffers: reuse freed memory instead of faulting in new.

Why: glibc serves an allocation above M_MMAP_THRESHOLD (dynamic, 128 KB to 32 MB) with a fresh mmap, and
hands the top of a heap above M_TRIM_THRESHOLD back to the kernel. A reader that receives 11 MB shards and
builds 3.5 MB batches then touches new pages all the time: measured on the s3-shards loader (2,000 x 110 KB,
2 cores), 15-20 page faults and 100-200 µs of kernel time per sample, 0.6 of the Go ceiling's rate. With both
thresholds fixed above those sizes the memory stays in the heap for the next buffer: 0-1 faults per sample,
kernel time halved, the rate near the Go ceiling's (Go and Java keep their heaps the same way), and peak RSS
unchanged. Setting only one of the two makes it worse (a fixed mmap threshold with the default trim
threshold trims after every free), so both are set together. The price: up to TRIM_THRESHOLD bytes of freed
heap stay mapped until the process ends.

Applied once per process by the first loader (`apply`), unless ``WORKBENCH_MALLOC_TUNING=0``; elsewhere than
glibc it does nothing. `describe` says what loaders run with, for the environment record.
"""

from __future__ import annotations

import ctypes
import platform
import threading

MMAP_THRESHOLD = 64 << 20  # above a shard (10-100 MB shards still come from mmap; they are few)
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h

_lock = threading.Lock()
_state = {"applied": False, "tried": False}


def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


def apply(enabled: bool = True) -> bool:
    """Fix glibc's mmap and trim thresholds for this process (once; later calls change nothing).

    Returns whether the thresholds are in force. `enabled` False (``WORKBENCH_MALLOC_TUNING=0``) leaves glibc's
    defaults: the first call decides for the whole process.
    """
    with _lock:
        if not _state["tried"]:
            _state["tried"] = True
            libc = _glibc() if enabled else None
            _state["applied"] = libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
                bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        return _state["applied"]


def describe(enabled: bool) -> str:
    """What a loader's process runs with under `enabled` (settings.malloc_tuning): for the environment record,
    which the process writing results (not always the one that read) makes."""
    if not enabled:
        return "glibc defaults (WORKBENCH_MALLOC_TUNING=0)"
    if _glibc() is None:
        return "defaults (not glibc)"
    return f"glibc mmap_threshold={MMAP_THRESHOLD >> 20}MiB trim_threshold={TRIM_THRESHOLD >> 20}MiB"
