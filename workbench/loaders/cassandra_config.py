"""The configuration every Cassandra loader takes, and what it resolves to before reading.

`CassandraConfig` is LoaderConfig plus the cassandra-dali-plugin's parameters, by name: the connection's
(`workbench.clients.cassandra_connection`), the table's (`workbench.layouts.cassandra_tables`), io_threads and
a split file. `resolve_layout` finds the table and columns; `FreshConnections` is what a Cassandra loader
pickles into DataLoader workers without. The cassandra-py and cassandra (native) loaders import this, not each
other's modules; the plugin's loader extends cassandra-py's (it reuses its ids, shards and epochs).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from workbench.backends import locate
from workbench.clients.cassandra_connection import CassandraConnection
from workbench.config import Settings
from workbench.data import SplitFile
from workbench.errors import WorkbenchError
from workbench.layouts.cassandra_tables import CassandraTables, Layout
from workbench.loaders.base import LoaderConfig
from workbench.loaders.retry import RetryConfig


class CassandraConfig(CassandraConnection, CassandraTables, RetryConfig, LoaderConfig):
    """LoaderConfig plus the plugin's connection and layout parameters (defaults: settings and catalog)."""

    io_threads: int = Field(2, ge=1, le=32, description="connections per host (one driver session each)")
    split_file: Path | None = Field(None, description="a split file (`workbench split`): read exactly the ids of "
                                                      "one of its splits, as source_uuids")
    split_index: int | str = Field(0, description="which split of split_file: its name or its position")

    @model_validator(mode="after")
    def _ids_from_split_file(self) -> CassandraConfig:
        """split_file + split_index become source_uuids (the plugin reads a split file's ids the same way)."""
        if self.split_file is None:
            return self
        if self.source_uuids is not None:
            raise ValueError("give source_uuids or split_file, not both")
        split = SplitFile.load(self.split_file)
        if split.dataset and split.dataset != self.dataset:
            raise ValueError(f"split file {self.split_file} was made for dataset '{split.dataset}', not "
                             f"'{self.dataset}': make one for this dataset (`workbench split`)")
        names = list(split.splits)
        if isinstance(self.split_index, int):
            if not 0 <= self.split_index < len(names):
                raise ValueError(f"split_index {self.split_index} is out of range: {self.split_file} has "
                                 f"{len(names)} splits ({', '.join(names)})")
            name = names[self.split_index]
        elif self.split_index in split.splits:
            name = self.split_index
        else:
            raise ValueError(
                f"split_index '{self.split_index}' is not in {self.split_file} (splits: {', '.join(names)})")
        ids = split.splits[name]
        if not ids:
            raise ValueError(f"split '{name}' of {self.split_file} has no ids")
        self.source_uuids = [str(i) for i in ids]
        return self


def resolve_layout(settings: Settings, config: CassandraConfig) -> Layout:
    """Table and columns: explicit settings win, the rest comes from the dataset's catalog entry."""
    entry: dict[str, Any] = {}
    needs_catalog = config.table is None or config.id_col is None or config.data_col is None or (
        config.label_type != "none" and config.label_col is None)
    if needs_catalog:
        entry = locate(settings, "cassandra", config.dataset)
    columns = entry.get("columns") or {}
    if config.table is not None:
        table = config.table
    else:
        tables = entry.get("tables") or {}
        if config.split not in tables:
            known = ", ".join(sorted(tables)) or "none"
            raise WorkbenchError(
                f"dataset '{config.dataset}' has no split '{config.split}' in Cassandra (splits: {known}): "
                "ingest it first (`workbench ingest`) or pass table='keyspace.table'"
            )
        table = tables[config.split]
    keyspace, name = table.split(".")
    stored_label_type = entry.get("label_type")
    if config.label_type != "none" and stored_label_type is not None and stored_label_type != config.label_type:
        raise WorkbenchError(
            f"dataset '{config.dataset}' stores label_type {stored_label_type} but the loader asks for "
            f"{config.label_type}: set label_type='{stored_label_type}' (or 'none')"
        )
    label_col = None
    if config.label_type != "none":
        label_col = config.label_col or columns.get("label")
        if label_col is None:
            raise WorkbenchError(f"table {table} has no label column: set label_type='none' (or label_col)")
    ids_table = None
    if config.source_uuids is None:
        metadata = (entry.get("metadata_tables") or {}).get(config.split) if config.table is None else None
        if metadata is None:  # the plugin's convention: ids in metadata_<x> beside data_<x>, else the table itself
            metadata = f"{keyspace}.metadata_{name[5:]}" if name.startswith("data_") else table
        ids_table = metadata
    return Layout(keyspace, name, config.id_col or columns.get("id") or "id", label_col,
                  config.data_col or columns.get("data") or "data", ids_table, config.label_type)


class FreshConnections:
    """Pickled without its connection state (`connection_state`, made anew by `_reset`): loaders travel to
    DataLoader workers, which connect on their own."""

    connection_state: ClassVar[tuple[str, ...]] = ()

    def _reset(self) -> None:
        raise NotImplementedError

    def _connect_retrying(self) -> Any:
        raise NotImplementedError

    def connect(self) -> None:
        """The session and the prepared statement now (re-tried like reads), not on the first read."""
        self._connect_retrying()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_lock", *self.connection_state):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._reset()
