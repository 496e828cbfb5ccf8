"""TensorFlow's IgniteDataset (tf.data) and a torch IterableDataset of the same elements, on our Ignite clients.

``IgniteDataset(cache_name, ...)``: the TensorFlow IgniteDataset of the article (``tf.data`` elements
``{'key': ..., 'val': {field: tensor, ...}}``, nested dicts for nested binary objects), for any cache:
workbench binary objects, SQL tables (``SQL_PUBLIC_<TABLE>``: upper-case column names), plain values.
As in the original, the schema is taken from the first object (homogeneous caches; an empty cache is an
error) and ``IGNITE_DATASET_HOST`` / ``IGNITE_DATASET_PORT`` / ``IGNITE_DATASET_PART`` in the
environment override host, port and part (so each node of a cluster can be told its partition).
The same elements as a torch ``IterableDataset``: `workbench.compat.ignite_torch`.

Login and TLS: ``username``/``password`` default to the settings' Ignite login; with ``WORKBENCH_TLS=1``
every connection uses TLS, the server verified against the stack's CA; ``certfile``/``keyfile``/
``cert_password`` add a client certificate (see `workbench.clients.ignite`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.clients.ignite import (
    Endpoint,
    close_quietly,
    ignite_errors,
    partition_count,
    require_cache,
    scan_cursor,
    settings_endpoint,
)
from workbench.compat.resumable import Order, PartitionReader
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.loaders.consumed import ConsumedState
from workbench.loaders.ignite import describe_value
from workbench.loaders.resume import check_state, make_state

DEFAULT_PARTITIONS = 1024
ENV_HOST, ENV_PORT, ENV_PART = "IGNITE_DATASET_HOST", "IGNITE_DATASET_PORT", "IGNITE_DATASET_PART"


# ------------------------------------------------------------------------------- IgniteDataset (tf.data)


_LEAVES: dict[str, tuple[str, bool]] = {  # pyignite type name -> (dtype name, is a 1-D array)
    "String": ("string", False), "CharObject": ("string", False), "Char": ("string", False),
    "ByteArrayObject": ("string", False), "ByteArray": ("string", False),
    "ByteObject": ("int32", False), "Byte": ("int32", False), "ShortObject": ("int32", False),
    "Short": ("int32", False), "IntObject": ("int32", False), "Int": ("int32", False),
    "LongObject": ("int64", False), "Long": ("int64", False),
    "FloatObject": ("float32", False), "Float": ("float32", False),
    "DoubleObject": ("float64", False), "Double": ("float64", False),
    "BoolObject": ("bool", False), "Bool": ("bool", False),
    "UUIDObject": ("string", False),
    "ShortArrayObject": ("int32", True), "ShortArray": ("int32", True),
    "IntArrayObject": ("int32", True), "IntArray": ("int32", True),
    "LongArrayObject": ("int64", True), "LongArray": ("int64", True),
    "FloatArrayObject": ("float32", True), "FloatArray": ("float32", True),
    "DoubleArrayObject": ("float64", True), "DoubleArray": ("float64", True),
    "BoolArrayObject": ("bool", True), "BoolArray": ("bool", True),
    "StringArrayObject": ("string", True),
}
_DEFAULTS: dict[str, Any] = {"string": b"", "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0, "bool": False}


@dataclass
class Node:
    """The schema of one value: a leaf (dtype, array or not) or an object (fields -> nodes)."""

    dtype: str | None = None
    array: bool = False
    fields: dict[str, Node] | None = None

    def spec(self):
        from workbench.tf_import import tensorflow
        tf = tensorflow()

        if self.fields is not None:
            return {name: child.spec() for name, child in self.fields.items()}
        return tf.TensorSpec((None,) if self.array else (), getattr(tf, self.dtype or "string"))

    def arrays(self, tree: Any) -> Any:
        """A converted value (`convert`) as numpy arrays of this node's dtypes, strings as bytes: what tf.data
        makes of it, for users without TensorFlow. A leaf that does not fit its dtype raises."""
        import numpy as np

        if self.fields is not None:
            return {name: child.arrays(tree[name]) for name, child in self.fields.items()}
        if self.dtype in (None, "string"):
            if not (all(isinstance(v, bytes) for v in tree) if self.array else isinstance(tree, bytes)):
                raise TypeError(f"a string leaf holds {type(tree).__name__}, not bytes")
            return tree
        return np.asarray(tree, dtype=getattr(np, "bool_" if self.dtype == "bool" else self.dtype))

    def convert(self, value: Any, where: str) -> Any:
        """The value as nested python dicts/lists of what tf converts to this node's spec."""
        if self.fields is not None:
            schema = getattr(type(value), "_schema", None)
            if not schema:
                raise WorkbenchError(f"{where} holds {describe_value(value)}, not an object like the first one "
                                     "(IgniteDataset needs homogeneous caches)")
            return {name: child.convert(getattr(value, name, None), f"{where}.{name}")
                    for name, child in self.fields.items()}
        if value is None:
            return [] if self.array else _DEFAULTS[self.dtype or "string"]
        try:
            if self.array:
                return [_leaf(v, self.dtype) for v in value]
            return _leaf(value, self.dtype)
        except (TypeError, ValueError, OverflowError) as exc:  # Overflow: float(10**400), int(Decimal('inf'))
            raise WorkbenchError(f"{where} holds {describe_value(value)}, not a {self.dtype}"
                                 f"{' array' if self.array else ''} like the first object ({exc})") from None


def _leaf(value: Any, dtype: str | None) -> Any:
    if dtype == "string":
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        if isinstance(value, str):
            return value.encode()
        if type(value).__name__ == "UUID":
            return str(value).encode()
        raise TypeError(f"{type(value).__name__} is not bytes or str")
    if dtype == "bool":
        return bool(value)
    if dtype in ("int32", "int64"):
        if isinstance(value, float | str | bytes):
            raise TypeError(f"{type(value).__name__} is not an integer")
        number, bits = int(value), 31 if dtype == "int32" else 63
        if not -(1 << bits) <= number < 1 << bits:  # tf.data would fail later, far from the entry
            raise ValueError(f"{number} is out of the {dtype} range")
        return number
    return float(value)


def infer_schema(value: Any, where: str) -> Node:
    """The schema of a value: a binary object's declared field types, else the python type of the value."""
    schema = getattr(type(value), "_schema", None)
    if schema:
        fields = {}
        for name, ignite_type in schema.items():
            type_name = getattr(ignite_type, "__name__", str(ignite_type))
            if type_name in _LEAVES:
                dtype, array = _LEAVES[type_name]
                fields[name] = Node(dtype, array)
            else:
                fields[name] = infer_schema(getattr(value, name, None), f"{where}.{name}")
        return Node(fields=fields)
    if isinstance(value, bytes | bytearray | memoryview | str) or type(value).__name__ == "UUID":
        return Node("string")
    if isinstance(value, bool):
        return Node("bool")
    if isinstance(value, int):
        return Node("int64")
    if isinstance(value, float):
        return Node("float64")
    if isinstance(value, list | tuple) and value and not isinstance(value[0], list | tuple | dict):
        return Node(infer_schema(value[0], where).dtype, array=True)
    if value is None:
        raise WorkbenchError(f"{where} is null in the first object: its type cannot be inferred")
    raise WorkbenchError(f"{where} is a {type(value).__name__}: IgniteDataset supports neither maps, object "
                         "arrays nor collections (see the article's limitations)")


def to_python(value: Any) -> Any:
    """Binary objects as nested dicts (for torch), byte arrays as bytes; other values unchanged."""
    schema = getattr(type(value), "_schema", None)
    if schema:
        return {name: to_python(getattr(value, name, None)) for name in schema}
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


@dataclass
class DatasetSource:
    """What IgniteDataset and IgniteTorchDataset read: one cache, where, which partition, which pages."""

    cache_name: str
    endpoint: Endpoint
    part: int = -1
    local: bool = False
    page_size: int = 100

    def first(self) -> tuple[Any, Any]:
        """The first entry of the cache (whole cache, not only `part`): it defines the schema."""
        client = self.endpoint.connect()
        try:
            require_cache(client, self.cache_name, self.endpoint.where)
            try:
                with scan_cursor(client, self.cache_name, 1, -1, self.local) as cursor:
                    for key, value in cursor:
                        return key, value
            except ignite_errors() as exc:
                raise WorkbenchError(f"reading Ignite cache {self.cache_name} at {self.endpoint.where} failed: "
                                     f"{type(exc).__name__}: {first_line(exc)}") from exc
        finally:
            close_quietly(client)
        raise WorkbenchError(f"Ignite cache {self.cache_name} at {self.endpoint.where} is empty: IgniteDataset takes "
                             "its schema from the first object, so the cache needs at least one")

    def entries(self, partitions: list[int] | None = None) -> Iterator[tuple[Any, Any]]:
        """(key, value) of `partitions` (default: `part`, -1 = the whole cache in one scan)."""
        client = self.endpoint.connect()
        try:
            for partition in partitions if partitions is not None else [self.part]:
                try:
                    with scan_cursor(client, self.cache_name, self.page_size, partition, self.local) as cursor:
                        yield from cursor
                except ignite_errors() as exc:
                    raise WorkbenchError(
                        f"scan of Ignite cache {self.cache_name} (partition {partition}) at {self.endpoint.where} "
                        f"failed: {type(exc).__name__}: {first_line(exc)}") from exc
        finally:
            close_quietly(client)

    def partitions(self) -> int:
        client = self.endpoint.connect()
        try:
            require_cache(client, self.cache_name, self.endpoint.where)
            return partition_count(client, self.cache_name)
        finally:
            close_quietly(client)


def dataset_source(cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                   part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                   certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                   settings: Settings | None = None, via_proxy: bool = False) -> DatasetSource:
    """Arguments of the original IgniteDataset, with its environment overrides, resolved to a source."""
    if not cache_name:
        raise WorkbenchError("IgniteDataset needs a cache name")
    if page_size < 1:
        raise WorkbenchError(f"page_size must be >= 1, got {page_size}")
    settings = settings or Settings()
    host = os.environ.get(ENV_HOST) or host
    port = _env_int(ENV_PORT, port)
    part = _env_int(ENV_PART, part)
    endpoint = settings_endpoint(settings, via_proxy, host=host, port=port, username=username, password=password,
                                 certfile=certfile, keyfile=keyfile, cert_password=cert_password)
    return DatasetSource(cache_name, endpoint, -1 if part is None else int(part), local, page_size)


def _env_int(name: str, value: int | None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return value
    try:
        return int(raw)
    except ValueError:
        raise WorkbenchError(f"environment variable {name}={raw!r} is not an integer") from None


def IgniteDataset(cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                  part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                  certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                  settings: Settings | None = None):
    """A tf.data.Dataset of the cache's entries as ``{'key': key, 'val': {field: tensor, ...}}``.

    The TensorFlow IgniteDataset of the article: one scan of the cache (or of partition `part` alone) in
    pages of `page_size` entries; `local` reads only the entries held by the node connected to. The
    schema (tensor types, nesting) comes from the first object: bytes and strings -> tf.string, Ignite
    int/short/byte -> tf.int32, long -> tf.int64, float/double, bool, primitive arrays -> 1-D tensors,
    nested binary objects -> nested dicts; null fields become 0 / b"" / []. Host and port default to the
    workbench settings; ``IGNITE_DATASET_HOST``, ``IGNITE_DATASET_PORT`` and ``IGNITE_DATASET_PART`` in the
    environment override host, port and part (the article's per-node override). Every iteration is a
    new scan; unreachable servers and empty caches fail here with a WorkbenchError.
    """
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    source = dataset_source(cache_name, host, port, local, part, page_size, username, password, certfile,
                            keyfile, cert_password, settings)
    first_key, first_value = source.first()
    key_node = infer_schema(first_key, f"Ignite cache {cache_name}: key")
    val_node = infer_schema(first_value, f"Ignite cache {cache_name}: key {first_key!r}")
    signature = {"key": key_node.spec(), "val": val_node.spec()}

    def generate() -> Iterator[dict]:
        for key, value in source.entries():
            where = f"Ignite cache {cache_name}: key {key!r}"
            yield {"key": key_node.convert(key, where), "val": val_node.convert(value, where)}

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


class ResumableIgniteDataset:
    """IgniteDataset's elements, resumable mid-scan (torchdata's Stateful convention); same arguments.

    Iterate it (eager tensors, as IgniteDataset's) and `state_dict()` is the state recorded with the last
    element taken, not where the scan is: tf.data reads ahead of the consumer (`workbench.loaders.consumed`).
    A fresh object given that state by `load_state_dict` goes on with the next entry, none twice, none
    missed (`workbench.compat.resumable.PartitionReader`: entries of the partition in progress are scanned
    again and dropped). `dataset` is the tf.data.Dataset itself (iterated elsewhere, nothing is counted).
    """

    _state_name = "ignite-dataset"

    def __init__(self, cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                 part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                 certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                 settings: Settings | None = None) -> None:
        from workbench.tf_import import tensorflow
        tf = tensorflow()

        self.source = dataset_source(cache_name, host, port, local, part, page_size, username, password, certfile,
                                     keyfile, cert_password, settings)
        first_key, first_value = self.source.first()
        self._key_node = infer_schema(first_key, f"Ignite cache {cache_name}: key")
        self._val_node = infer_schema(first_value, f"Ignite cache {cache_name}: key {first_key!r}")
        self.epoch = 0
        self._pending: dict[str, Any] | None = None
        self._resume: dict[str, Any] | None = None
        self._consumed = ConsumedState(self._start())
        signature = {"key": self._key_node.spec(), "val": self._val_node.spec()}
        self.dataset = tf.data.Dataset.from_generator(self._generate, output_signature=signature)

    def _order(self) -> Order:
        return ignite_order(self.source)

    def _start(self) -> dict[str, Any]:
        return make_state(self._state_name, self._order(), 0, 1, self.epoch)  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, Any]:
        return self._consumed.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from `state` (checked now: a state of another cache or part is one WorkbenchError line)."""
        resume = check_state(self._state_name, state, self._order(), 0, 1)  # type: ignore[arg-type]
        self.epoch, self._pending = resume.epoch, dict(state)
        self._consumed.restart(self._pending)

    def _generate(self) -> Iterator[dict]:
        reader = PartitionReader(self, [self.source.part], self._resume)
        for key, value in reader.entries():
            where = f"Ignite cache {self.source.cache_name}: key {key!r}"
            element = {"key": self._key_node.convert(key, where), "val": self._val_node.convert(value, where)}
            self._consumed.produced(reader.state_dict())  # before tf can hand the element on
            yield element
        self._consumed.finished(reader.state_dict())

    def __iter__(self) -> Iterator[dict]:
        self._resume, self._pending = self._pending, None
        self._consumed.restart(self._resume or self._start())
        for element in self.dataset:
            self._consumed.taken()
            yield element
        self._consumed.exhausted()


def ignite_order(source: DatasetSource, seed: int = 0, shuffle: bool = False, shard_id: int = 0,
                 num_shards: int = 1) -> Order:
    """What fixes the order of an Ignite dataset's scan, for its saved states: the cache, where, which part."""
    return Order(f"ignite://{source.endpoint.where}/{source.cache_name}/part{source.part}", seed, shuffle, shard_id,
                 num_shards)
