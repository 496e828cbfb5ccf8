"""Backend name -> implementation. Adding a backend is one module plus one line here.

Entries are import paths, so `workbench --help` never imports every client library.
"""

from __future__ import annotations

from importlib import import_module

from workbench import catalog
from workbench.backends.base import Backend, LayoutOptions
from workbench.config import Settings
from workbench.errors import WorkbenchError

BACKENDS: dict[str, str] = {
    "cassandra": "workbench.backends.cassandra:CassandraBackend",
    "s3-objects": "workbench.backends.s3_objects:S3ObjectsBackend",
    "s3-shards": "workbench.backends.s3_shards:S3ShardsBackend",
    "ignite": "workbench.backends.ignite:IgniteBackend",
    "fs": "workbench.backends.fs:FilesystemBackend",
}


def backend_class(name: str) -> type[Backend]:
    if name not in BACKENDS:
        raise WorkbenchError(f"unknown backend '{name}': choose from {', '.join(BACKENDS)}")
    module, attr = BACKENDS[name].split(":")
    return getattr(import_module(module), attr)


def locate(settings: Settings, backend: str, dataset: str) -> dict:
    """Where `dataset` lives in `backend`: the catalog's entry, else the backend's default layout for the name."""
    recorded = catalog.entry(settings, backend, dataset)
    return recorded if recorded is not None else backend_class(backend)(settings, dataset).describe()


def make_backend(name: str, settings: Settings, dataset: str, **options) -> Backend:
    """Build a backend with validated layout options (unknown or invalid options fail before any I/O)."""
    from pydantic import ValidationError

    cls = backend_class(name)
    try:
        opts: LayoutOptions = cls.Options(**{k: v for k, v in options.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        valid = ", ".join(cls.Options.model_fields)
        raise WorkbenchError(f"invalid {name} option '{field}': {first['msg']} (options: {valid})") from exc
    return cls(settings, dataset, opts)
