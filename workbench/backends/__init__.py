"""Storage backends: one module per system, each a layout, a streaming writer and a raw reader."""

from workbench.backends.base import Backend, LayoutOptions, StoredSample
from workbench.backends.registry import BACKENDS, backend_class, locate, make_backend, register_backend

__all__ = ["BACKENDS", "Backend", "LayoutOptions", "StoredSample", "backend_class", "locate", "make_backend",
           "register_backend"]
