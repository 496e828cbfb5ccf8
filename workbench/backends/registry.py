"""Backend name -> implementation. Adding a backend is one module plus one line here (or `register_backend`).

Entries are import paths, so `workbench --help` never imports every client library (`workbench.registry`).
"""

from __future__ import annotations

from collections.abc import Callable

from workbench import catalog
from workbench.backends.base import Backend, LayoutOptions
from workbench.config import Settings
from workbench.registry import Registry, validated

BACKENDS = Registry("backend", {
    "cassandra": "workbench.backends.cassandra:CassandraBackend",
    "s3-objects": "workbench.backends.s3_objects:S3ObjectsBackend",
    "s3-shards": "workbench.backends.s3_shards:S3ShardsBackend",
    "ignite": "workbench.backends.ignite:IgniteBackend",
    "fs": "workbench.backends.fs:FilesystemBackend",
})
backend_class: Callable[[str], type[Backend]] = BACKENDS.resolve
register_backend = BACKENDS.register  # (name, "module:Class" or the Backend subclass itself)


def locate(settings: Settings, backend: str, dataset: str) -> dict:
    """Where `dataset` lives in `backend`: the catalog's entry, else the backend's default layout for the name."""
    recorded = catalog.entry(settings, backend, dataset)
    return recorded if recorded is not None else backend_class(backend)(settings, dataset).describe()


def make_backend(name: str, settings: Settings, dataset: str, **options) -> Backend:
    """Build a backend with validated layout options (unknown or invalid options fail before any I/O)."""
    cls = backend_class(name)
    given = {k: v for k, v in options.items() if v is not None}
    opts: LayoutOptions = validated(cls.Options, given, f"{name} option", "options")
    return cls(settings, dataset, opts)
