"""What the python-backend models in triton_models/ share; it runs inside Triton's python stub.

The stack starts Triton with this interpreter's environment (`workbench.stack.triton`), so the models
import this module like any installed one. `triton_python_backend_utils` exists only inside the stub:
it is imported when a helper needs it, so this module also imports (and is tested) outside Triton.

Why the DLPack detour: the python-backend stub of the nvidia-pytriton wheel is built with a pybind11
that misreads NumPy 2 dtypes. With NumPy 2, ``Tensor(name, ndarray)`` yields empty tensors and
``as_numpy()`` garbage, so arrays cross with DLPack. With NumPy 1 the plain API is the safe one: the
stub renames consumed capsules 'used_dlpack', and NumPy 1's capsule destructor then reports the dying
capsule to sys.unraisablehook (a crash). See triton_models/preprocess/config.pbtxt.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

NUMPY2 = int(np.__version__.split(".")[0]) >= 2


def tensor(name: str, array: np.ndarray) -> Any:
    """An output tensor the stub reads correctly under NumPy 1 and 2."""
    import triton_python_backend_utils as pb_utils

    array = np.ascontiguousarray(array)
    return pb_utils.Tensor.from_dlpack(name, array) if NUMPY2 else pb_utils.Tensor(name, array)


def input_array(request: Any, name: str) -> np.ndarray | None:
    """A request's input as a NumPy array (through DLPack), None when the optional input is absent."""
    import triton_python_backend_utils as pb_utils

    value = pb_utils.get_input_tensor_by_name(request, name)
    return None if value is None else np.from_dlpack(value)


def param(config: dict, key: str, default: str) -> str:
    """A string parameter of the model's config.pbtxt; `default` when absent or empty."""
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return value if value not in ("", None) else default


def error(message: str, code: str = "INTERNAL") -> Any:
    """A TritonError with `code` (INVALID_ARG, NOT_FOUND, UNAVAILABLE ...) where the backend knows codes."""
    import triton_python_backend_utils as pb_utils

    value = getattr(pb_utils.TritonError, code, None)  # error codes: python backend >= 23.x
    return pb_utils.TritonError(message) if value is None else pb_utils.TritonError(message, value)


def quiet_numpy_dlpack_deleter() -> None:
    """Drop one known, harmless report per output tensor.

    The stub renames DLPack capsules it consumed to 'used_dlpack' (the DLPack protocol says
    'used_dltensor'), so NumPy 2's capsule destructor reports "PyCapsule_GetPointer called with incorrect
    name" through sys.unraisablehook (with no object: safe to drop). Nothing leaks: the stub calls the
    tensor's own deleter when done.
    """
    previous = sys.unraisablehook
    if not NUMPY2 or getattr(previous, "_drops_dlpack_capsule_report", False):
        return  # NumPy 1 arrays never go through DLPack here (see NUMPY2)

    def hook(unraisable) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, ValueError) and "PyCapsule_GetPointer called with incorrect name" in str(exc):
            return
        previous(unraisable)

    hook._drops_dlpack_capsule_report = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
