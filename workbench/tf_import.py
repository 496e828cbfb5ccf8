"""Import TensorFlow so that PyTorch still works in the same process.

TensorFlow and the `triton` compiler that CUDA builds of PyTorch pull in both register LLVM
command-line options; if TensorFlow loads first, importing triton later (torchvision.ops and
torch._dynamo do) aborts the process with "LLVM ERROR: inconsistency in registered CommandLine
options". Loading triton first avoids it, so every TensorFlow import in the workbench goes through here.
"""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType


def tensorflow() -> ModuleType:
    if "tensorflow" not in sys.modules:
        with contextlib.suppress(ImportError):
            import triton  # noqa: F401 - only its load order matters
    import tensorflow as tf

    return tf
