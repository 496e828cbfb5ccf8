"""The Cassandra layout a reader reads: the cassandra-dali-plugin's table parameters, the resolved `Layout`,
and the two queries every Cassandra reader starts with (the per-sample SELECT, the split's ids).

Samples are rows of ``<keyspace>.data_<split>(id uuid PRIMARY KEY, label, data blob)``; the ids come from the
split's metadata table (``metadata_<split>``) or `source_uuids`. Shared by the three Cassandra loaders and
their ceilings; `CassandraTables` is mixed into their LoaderConfig (which holds `label_type`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, field_validator, model_validator

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from cassandra.cluster import Session
    from cassandra.query import PreparedStatement

ID_FETCH_SIZE = 5000  # ids are 16 bytes: big pages, few round trips
_NAME = r"[a-z][a-z0-9_]{0,47}"
_TABLE = re.compile(rf"^{_NAME}\.{_NAME}$")
_COLUMN = re.compile(rf"^{_NAME}$")
_CQL_LABEL = {"int": "int", "blob": "blob"}  # label_type -> the CQL type of its column


class CassandraTables(BaseModel):
    """The plugin's table parameters (defaults: the dataset's catalog entry)."""

    if TYPE_CHECKING:
        label_type: str  # a LoaderConfig field: this is mixed into one

    table: str | None = Field(None, description="data table 'keyspace.table' (default: <keyspace>.data_<split>)")
    id_col: str | None = Field(None, description="uuid primary key column (default: from the catalog)")
    label_col: str | None = Field(None, description="label column (default: from the catalog)")
    data_col: str | None = Field(None, description="blob column (default: from the catalog)")
    source_uuids: list[str] | None = Field(None, min_length=1,
                                           description="ids to read (default: every id of the split's metadata table)")

    @field_validator("table")
    @classmethod
    def _table(cls, value: str | None) -> str | None:
        if value is not None and not _TABLE.match(value):
            raise ValueError(f"table {value!r} must be 'keyspace.table' in lower-case letters, digits and '_'")
        return value

    @field_validator("id_col", "label_col", "data_col")
    @classmethod
    def _column(cls, value: str | None) -> str | None:
        if value is not None and not _COLUMN.match(value):
            raise ValueError(f"column {value!r}: use lower-case letters, digits and '_', starting with a letter")
        return value

    @field_validator("source_uuids")
    @classmethod
    def _uuids(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        canonical = []
        for i, text in enumerate(value):
            try:
                canonical.append(str(uuid.UUID(str(text))))
            except ValueError:
                raise ValueError(f"source_uuids[{i}] = {text!r} is not a UUID") from None
        return canonical

    @model_validator(mode="after")
    def _distinct_columns(self) -> CassandraTables:
        cols = [c for c in (self.id_col, self.data_col, self.label_col if self.label_type != "none" else None) if c]
        if len(set(cols)) != len(cols):
            raise ValueError(f"id_col, label_col and data_col must differ, got {', '.join(cols)}")
        return self


@dataclass(frozen=True)
class Layout:
    """Where a split's samples are, resolved once from the config and the catalog."""

    keyspace: str
    table: str  # bare table name
    id_col: str
    label_col: str | None  # None: no label read (label_type none)
    data_col: str
    ids_table: str | None  # 'keyspace.table' to list ids from; None when source_uuids are given
    label_type: str

    @property
    def name(self) -> str:
        return f"{self.keyspace}.{self.table}"

    def quoted(self, table: str | None = None) -> str:
        keyspace, name = (table or self.name).split(".")
        return f'"{keyspace}"."{name}"'

    def select(self) -> str:
        columns = ", ".join(f'"{c}"' for c in [self.data_col, *([self.label_col] if self.label_col else [])])
        return f'SELECT {columns} FROM {self.quoted()} WHERE "{self.id_col}" = ?'


def prepare(session: Session, layout: Layout) -> PreparedStatement:
    """The per-sample SELECT; checks the label column's type against label_type."""
    from cassandra import InvalidRequest

    try:
        statement = session.prepare(layout.select())
    except InvalidRequest as exc:
        raise WorkbenchError(
            f"cannot read {layout.name}: {str(exc).splitlines()[0]} (ingested? right table and columns?)"
        ) from exc
    if layout.label_col is not None:
        check_label_type(layout, {m[2]: m[3].typename for m in statement.result_metadata}.get(layout.label_col))
    return statement


def check_label_type(layout: Layout, found: str | None) -> None:
    """The label column's CQL type must be what label_type reads; else one line naming the type to use."""
    if found != _CQL_LABEL[layout.label_type]:
        hint = found if found in _CQL_LABEL.values() else "none"
        raise WorkbenchError(
            f"column {layout.label_col} of {layout.name} has type {found}, not {_CQL_LABEL[layout.label_type]}: "
            f"set label_type='{hint}'"
        )


def list_ids(session: Session, layout: Layout) -> list[str]:
    """Every id of the split, sorted: every rank and worker starts from the same list."""
    from cassandra import InvalidRequest
    from cassandra.query import SimpleStatement

    assert layout.ids_table is not None
    query = SimpleStatement(f'SELECT "{layout.id_col}" FROM {layout.quoted(layout.ids_table)}',
                            fetch_size=ID_FETCH_SIZE)
    try:
        ids = sorted(str(row[0]) for row in session.execute(query))
    except InvalidRequest as exc:
        raise WorkbenchError(f"cannot list the ids of {layout.ids_table}: {str(exc).splitlines()[0]}") from exc
    if not ids:
        raise WorkbenchError(f"{layout.ids_table} holds no ids: nothing to read (ingest the dataset first)")
    return ids
