"""Which heap a `bytes` object was made in (glibc): the check behind the tests of `workbench_native.reserve`.

glibc gives each thread that allocates its own heap (arena); a chunk of any heap but the main one carries
NON_MAIN_ARENA (4) in the size word just before it, and a chunk of its own mapping IS_MMAPPED (2). A `bytes`
object over 512 bytes is one malloc'ed chunk whose address is the object's `id`.
"""

from __future__ import annotations

import ctypes
import platform

import pytest

IS_MMAPPED, NON_MAIN_ARENA = 2, 4

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="reads glibc's chunk headers")


def chunk_flags(obj: bytes) -> int:
    if len(obj) <= 512:
        raise ValueError("a bytes object of 512 bytes or less comes from pymalloc's pools, not a malloc chunk")
    return ctypes.c_size_t.from_address(id(obj) - ctypes.sizeof(ctypes.c_size_t)).value & 7


def in_a_thread_heap(obj: bytes) -> bool:
    """Made by a thread other than the main one (with its own heap), not in the main heap or a mapping of its own."""
    return bool(chunk_flags(obj) & NON_MAIN_ARENA)
