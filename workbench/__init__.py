"""Workbench: measure how fast training and inference can be fed from remote storage.

The public API is the names below; everything else in the package is internal. They load lazily (PEP 562), so
``import workbench`` and the storage, loader and ingest names import neither torch nor TensorFlow: only the
framework adapters do, when asked for.

    from workbench import Settings, make_loader, LoaderDataset
    loader = make_loader("s3-shards", Settings(), dataset="demo", concurrency="auto")
    outcome = run("specs/loaders.yaml", "rtt_ms=[0, 50]")  # an experiment spec, its rows and results folder
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it: the one list of what is public
_PUBLIC = {
    "Settings": "workbench.config",
    "WorkbenchError": "workbench.errors",
    "parse_source": "workbench.data",
    "ingest": "workbench.ingest",
    "make_backend": "workbench.backends",
    "register_backend": "workbench.backends",
    "make_loader": "workbench.loaders",
    "register_loader": "workbench.loaders",
    "Loader": "workbench.loaders",
    "LoaderConfig": "workbench.loaders",
    "Store": "workbench.storage",
    "LoaderDataset": "workbench.adapters.torch",
    "BatchDataset": "workbench.adapters.torch",
    "tf_dataset": "workbench.adapters.tf",
    "image_pipeline": "workbench.adapters.dali",
    "run": "workbench.experiments",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench' has no attribute {name!r} (public names: {', '.join(__all__)})")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*__all__, "__version__"]


class _Package(types.ModuleType):
    """Keeps a public function named like its own module (`ingest` in `workbench.ingest`): importing that module
    sets the package's attribute to the module, so `from workbench import ingest` would give a module."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _PUBLIC.get(name) == value.__name__ and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
