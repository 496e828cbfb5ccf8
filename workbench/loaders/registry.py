"""Loader name -> implementation (import paths, so nothing heavy is imported until used)."""

from __future__ import annotations

from importlib import import_module

from pydantic import ValidationError

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders.base import Loader

LOADERS: dict[str, str] = {
    "cassandra": "workbench.loaders.cassandra_native:CassandraNativeLoader",  # C++ driver (acsylla)
    "cassandra-py": "workbench.loaders.cassandra:CassandraLoader",  # Python driver: the before, kept measurable
    "cassandra-plugin": "workbench.loaders.cassandra_plugin:CassandraPluginLoader",
    "s3-shards": "workbench.loaders.s3_shards:S3ShardsLoader",
    "s3-objects": "workbench.loaders.s3_objects:S3ObjectsLoader",
    "s3-naive": "workbench.loaders.s3_objects:S3NaiveLoader",
    "ignite": "workbench.loaders.ignite:IgniteLoader",
    "fs": "workbench.loaders.fs:FilesystemLoader",
    # peers: other projects' readers on the same data, measured side by side
    "webdataset": "workbench.loaders.peers.webdataset:WebDatasetPeer",
    "s3torchconnector": "workbench.loaders.peers.s3torchconnector:S3TorchConnectorPeer",
    "mosaic-streaming": "workbench.loaders.peers.mosaic:MosaicStreamingPeer",
}


def loader_class(name: str) -> type[Loader]:
    if name not in LOADERS:
        raise WorkbenchError(f"unknown loader '{name}': choose from {', '.join(sorted(LOADERS))}")
    module, attr = LOADERS[name].split(":")
    return getattr(import_module(module), attr)


def make_loader(name: str, settings: Settings, worker_id: int = 0, num_workers: int = 1, **config) -> Loader:
    """Build a loader from a config dict; invalid settings are rejected before any I/O."""
    cls = loader_class(name)
    try:
        validated = cls.Config(**config)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "config"
        raise WorkbenchError(
            f"invalid {name} loader setting '{field}': {first['msg']} (settings: {', '.join(cls.Config.model_fields)})"
        ) from exc
    return cls(settings, validated, worker_id, num_workers)
