"""The real cassandra-dali-plugin (`fn.crs4.cassandra`, C++ driver inside a DALI operator) as a loader.

Its only wheel is built for CPython 3.12 on glibc >= 2.39 with DALI 2.1. Where it cannot load, building
or iterating this loader raises one clear line that points at loader 'cassandra' (the same strategy on
the Python driver). Where it loads, each epoch builds a CPU DALI pipeline around `fn.crs4.cassandra`,
feeds it this shard's ids in this epoch's order (the workbench's seeded order, so ranks, DataLoader
workers and the other loaders agree; the plugin's own shuffling is off) and yields its samples as Items.
The plugin outputs (data, label) without the uuid, so keys come from the order fed in; that is why its
out-of-order mode (`ooo`) is not used.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import platform
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field, model_validator

from workbench.clients.cassandra_connection import endpoints, own_certificate, tls_of
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line, with_type
from workbench.loaders.base import Item, LoaderConfig, RequestModel
from workbench.loaders.cassandra import CassandraLoader
from workbench.loaders.cassandra_config import CassandraConfig, resolve_layout

PLUGIN_MODULE = "crs4.cassandra_utils"
PLUGIN_LIBRARY = "libcrs4cassandra.so"  # installed two levels above crs4/cassandra_utils/
WHEEL_NEEDS = "CPython 3.12 on glibc >= 2.39 with DALI 2.1"

_loaded: bool = False


def this_platform() -> str:
    libc, version = platform.libc_ver()
    libc_text = f"{libc} {version}" if libc else "an unknown libc"
    return f"{platform.python_implementation()} {platform.python_version()} on {libc_text}"


def not_loadable(reason: str | None = None) -> WorkbenchError:
    detail = f"; {reason}" if reason else ""
    return WorkbenchError(
        f"cassandra-dali-plugin is not loadable here: its wheel needs {WHEEL_NEEDS} "
        f"(this is {this_platform()}{detail}); use loader 'cassandra'"
    )


def load_plugin() -> None:
    """Import crs4.cassandra_utils and load libcrs4cassandra.so into DALI once; a clear error otherwise."""
    global _loaded
    if _loaded:
        return
    try:
        if importlib.util.find_spec("crs4") is None or importlib.util.find_spec(PLUGIN_MODULE) is None:
            raise not_loadable()
    except (ImportError, ValueError):
        raise not_loadable() from None
    try:
        utils = importlib.import_module(PLUGIN_MODULE)
        import nvidia.dali.plugin_manager as plugin_manager

        library = Path(utils.__path__[0]).parent.parent / PLUGIN_LIBRARY
        plugin_manager.load_library(str(library))
    except Exception as exc:  # ImportError, OSError, DALI's RuntimeError: a wheel for another platform
        raise not_loadable(with_type(exc)) from exc
    _loaded = True


class CassandraPluginConfig(CassandraConfig):
    """The Cassandra loader's settings plus the plugin's own thread pools."""

    copy_threads: int = Field(2, ge=1, le=64, description="threads copying rows into DALI buffers")
    wait_threads: int = Field(2, ge=1, le=64, description="threads waiting on the C++ driver's futures")
    comm_threads: int = Field(2, ge=1, le=64, description="threads issuing requests")
    dali_threads: int = Field(2, ge=1, le=64, description="DALI pipeline CPU threads")

    @model_validator(mode="after")
    def _no_bundle(self) -> CassandraPluginConfig:
        if self.cloud_config is not None:
            raise ValueError("cloud_config is not handed to fn.crs4.cassandra by this loader (untested without the "
                             "plugin's wheel): use loader 'cassandra' or 'cassandra-py' with the bundle")
        return self

    @model_validator(mode="after")
    def _in_order(self) -> CassandraPluginConfig:
        if not self.ordered:
            raise ValueError("ordered=False (the plugin's ooo mode) is not supported: its outputs carry no uuid, "
                             "so samples could not be named")
        return self


class CassandraPluginLoader(CassandraLoader):
    """fn.crs4.cassandra in a DALI pipeline; ids, shards and epochs as the 'cassandra' loader computes them."""

    name = "cassandra-plugin"
    request_model = RequestModel("the plugin's C++ reader decides what is in flight", per_request=None)
    benchmarked_by_default = False  # the plugin wheel needs CPython 3.12 and a GPU machine
    chaos_window = None
    backend = "cassandra"
    Config = CassandraPluginConfig
    config: CassandraPluginConfig

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        load_plugin()
        if not isinstance(config, CassandraPluginConfig):
            config = CassandraPluginConfig(**config.model_dump())
        super().__init__(settings, config, worker_id, num_workers)

    def reader_arguments(self, ids: list[str]) -> dict:
        """fn.crs4.cassandra's arguments for these ids, from our settings (also for native pipelines)."""
        c = self.config
        layout = self._layout or resolve_layout(self.settings, c)
        self._layout = layout
        hosts, port = endpoints(self.settings, c)
        username, password = c.username, c.password
        if username is None:
            username, password = self.settings.cassandra_username, self.settings.cassandra_password
        use_ssl, certificate = tls_of(self.settings, c)  # the stack's CA when use_ssl is left to settings.tls
        arguments = {
            "name": "Reader", "cassandra_ips": hosts, "cassandra_port": port, "table": layout.name,
            "id_col": layout.id_col, "data_col": layout.data_col, "label_type": c.label_type,
            "source_uuids": ids, "shuffle_every_epoch": False, "prefetch_buffers": c.prefetch_buffers,
            "io_threads": c.io_threads, "comm_threads": c.comm_threads, "copy_threads": c.copy_threads,
            "wait_threads": c.wait_threads, "ooo": False, "use_ssl": use_ssl,
        }
        if layout.label_col is not None:
            arguments["label_col"] = layout.label_col
        # fn.crs4.cassandra has no default for username/password and refuses to build without them (seen
        # on the H100 run, results/gpu); a node without authentication never asks for them.
        arguments.update(username=username or "", password=password.get_secret_value() if password else "")
        if certificate:
            arguments["ssl_certificate"] = certificate
        own = own_certificate(self.settings, c)  # the stack's client certificate when it requires one
        if own is not None:
            arguments.update(ssl_own_certificate=own[0], ssl_own_key=own[1])
            if own[2] is not None:
                arguments["ssl_own_key_pass"] = own[2]
        return arguments

    def _pipeline(self, ids: list[str]):
        from nvidia.dali import fn, pipeline_def

        arguments = self.reader_arguments(ids)
        batch_size = self.config.batch_size

        @pipeline_def(batch_size=batch_size, num_threads=self.config.dali_threads, device_id=None,
                      prefetch_queue_depth=1)  # the plugin prefetches itself (prefetch_buffers)
        def reader():
            data, labels = fn.crs4.cassandra(**arguments)
            return data, labels

        pipe = reader()
        try:
            pipe.build()
        except Exception as exc:
            raise WorkbenchError(
                f"cannot build the cassandra-dali-plugin pipeline for {arguments['table']} at "
                f"{', '.join(arguments['cassandra_ips'])}:{arguments['cassandra_port']}: "
                f"{first_line(exc)}"
            ) from exc
        return pipe

    def _label(self, labels, i: int) -> int | bytes | None:
        import numpy as np

        if self.config.label_type == "none":
            return None
        value = np.asarray(labels.at(i))
        if self.config.label_type == "int":
            return int(value.reshape(-1)[0])
        return value.tobytes()

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        import numpy as np

        load_plugin()
        # lists the split once through the Python driver (metadata table); resuming: the ids not yet delivered
        ids = self.unread(epoch, self.shard_ids(epoch), key=str)
        if not ids:
            return
        pipe = self._pipeline(ids)
        try:
            position = 0
            for _ in range(math.ceil(len(ids) / self.config.batch_size)):
                try:
                    data, labels = pipe.run()
                except StopIteration:
                    break
                except Exception as exc:
                    raise WorkbenchError(
                        f"cassandra-dali-plugin failed reading {self._layout.name if self._layout else 'its table'}"
                        f": {first_line(exc)}"
                    ) from exc
                for i in range(len(data)):
                    if position == len(ids):  # the last batch is padded up to batch_size
                        break
                    yield Item(ids[position], self._label(labels, i), np.asarray(data.at(i)).tobytes())
                    position += 1
            if position < len(ids):
                raise WorkbenchError(
                    f"cassandra-dali-plugin delivered {position} of {len(ids)} samples of {self._layout.name}"
                )
        finally:
            del pipe
