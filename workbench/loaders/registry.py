"""Loader name -> implementation (import paths, so nothing heavy is imported until used)."""

from __future__ import annotations

from collections.abc import Callable

from workbench.config import Settings
from workbench.loaders.base import Loader
from workbench.registry import Registry, validated

LOADERS = Registry("loader", {
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
})
loader_class: Callable[[str], type[Loader]] = LOADERS.resolve
register_loader = LOADERS.register  # (name, "module:Class" or the Loader subclass itself)


def default_loaders() -> list[str]:
    """The loaders measured when none is named: ours, not the peers or GPU-only readers (their descriptors)."""
    return [name for name in LOADERS if loader_class(name).benchmarked_by_default]


def make_loader(name: str, settings: Settings, worker_id: int = 0, num_workers: int = 1, **config) -> Loader:
    """Build a loader from a config dict; invalid settings are rejected before any I/O."""
    cls = loader_class(name)
    return cls(settings, validated(cls.Config, config, f"{name} loader setting", "settings"), worker_id, num_workers)
