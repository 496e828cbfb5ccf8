"""cassandra_fetch: sample UUIDs in, encoded image bytes (and int labels) out, read from Cassandra in Triton.

This is the server-side read of cassandra-dali-plugin's Triton example: clients send ids (36 bytes), not
~110 KB images. The table follows the workbench layout (`data_<split>(id uuid PRIMARY KEY, label, data)`).

* Connection settings are the workbench's, from the server's environment (`WORKBENCH_HOST`,
  `WORKBENCH_CASSANDRA_PORT`, `WORKBENCH_CASSANDRA_USERNAME`/`_PASSWORD`, `WORKBENCH_TIMEOUT_S`,
  `WORKBENCH_TLS` and `WORKBENCH_TLS_CA_FILE`: TLS verified against that CA, host name included); the
  stack exports them when it starts Triton. The password is never logged.
* The model connects lazily (at the first request, again after a failure), so it loads, and the server
  is ready, even while Cassandra is still starting; requests then get a clear UNAVAILABLE error.
* All distinct UUIDs of a dynamic batch are read concurrently (`execute_async` on a prepared statement).
* Tensors cross the stub with DLPack only (its pybind11 misreads NumPy 2 dtypes: see
  ../../preprocess/config.pbtxt); the helpers for that are shared with the other models
  (`workbench.triton_python`).
* Errors are per request: an unknown UUID, a malformed one or a failed read fails the request that
  carries it, with a message naming the UUID and table; the other requests of the batch succeed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import ssl
import threading
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils

from workbench.triton_python import error as _error
from workbench.triton_python import param as _param
from workbench.triton_python import quiet_numpy_dlpack_deleter as _quiet_numpy_dlpack_deleter
from workbench.triton_python import tensor as _tensor

DEFAULT_TABLE = "workbench_triton.data_train"
# v4, as the workbench's Cassandra loader: v5's checksummed segments cost the Python driver ~25% more CPU
# per ~110 KB blob.
PROTOCOL_VERSION = 4
_TABLE = re.compile(r"^[a-z][a-z0-9_]{0,47}\.[a-z][a-z0-9_]{0,47}$")
_COLUMN = re.compile(r"^[a-z][a-z0-9_]{0,47}$")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


class RequestError(Exception):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class TritonPythonModel:
    def initialize(self, args):
        _quiet_numpy_dlpack_deleter()
        config = json.loads(args["model_config"])
        self.table = _param(config, "table", os.environ.get("WORKBENCH_TRITON_CASSANDRA_TABLE") or DEFAULT_TABLE)
        self.allow_request_table = _param(config, "allow_request_table", "true").lower() == "true"
        self.columns = {k: _param(config, k, d) for k, d in (("id_col", "id"), ("label_col", "label"),
                                                             ("data_col", "data"))}
        problem = self._bad_table(self.table, "model parameter table")
        if problem:
            raise pb_utils.TritonModelException(problem)
        for key, column in self.columns.items():
            if not _COLUMN.match(column):
                raise pb_utils.TritonModelException(f"cassandra_fetch: invalid column name {column!r} ({key})")
        self.host = os.environ.get("WORKBENCH_HOST", "127.0.0.1")
        self.port = int(os.environ.get("WORKBENCH_CASSANDRA_PORT", "9042"))
        self.timeout_s = float(os.environ.get("WORKBENCH_TIMEOUT_S", "10"))
        self.username = os.environ.get("WORKBENCH_CASSANDRA_USERNAME") or None
        self._password = os.environ.get("WORKBENCH_CASSANDRA_PASSWORD") or None
        self.tls = os.environ.get("WORKBENCH_TLS", "").strip().lower() in ("1", "true", "yes", "on")
        self.ca_file = os.environ.get("WORKBENCH_TLS_CA_FILE") or None
        self.cluster = None
        self.session = None
        self.statements: dict[str, tuple] = {}  # table -> (prepared statement, has label column)
        self.lock = threading.Lock()
        import cassandra  # noqa: F401 - fail at load, with a clear message, when the driver is missing

        pb_utils.Logger.log_info(
            f"cassandra_fetch: {self.host}:{self.port} table {self.table} (auth: {'yes' if self.username else 'no'}, "
            f"tls: {'yes' if self.tls else 'no'}), "
            "connecting at the first request"
        )

    # ------------------------------------------------------------------------------ connection

    @staticmethod
    def _bad_table(table: str, where: str) -> str | None:
        if _TABLE.match(table):
            return None
        return (f"cassandra_fetch: invalid table {table[:100]!r} ({where}): use keyspace.table, "
                "lower-case letters, digits and '_'")

    def _connect(self):
        from cassandra.auth import PlainTextAuthProvider
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
        from cassandra.policies import RoundRobinPolicy

        if self.session is not None:
            return self.session
        auth = PlainTextAuthProvider(self.username, self._password) if self.username and self._password else None
        try:  # CERT_REQUIRED and a host name check, against the stack's CA (the system's CAs without one)
            context = ssl.create_default_context(cafile=self.ca_file) if self.tls else None
        except (OSError, ssl.SSLError) as exc:
            raise RequestError(f"cassandra_fetch: TLS CA file {self.ca_file} is unusable: {_first_line(exc)}",
                               "UNAVAILABLE") from exc
        cluster = Cluster(
            [self.host], port=self.port, auth_provider=auth, protocol_version=PROTOCOL_VERSION, ssl_context=context,
            connect_timeout=self.timeout_s, control_connection_timeout=self.timeout_s,
            execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=RoundRobinPolicy(), request_timeout=self.timeout_s)},
        )
        try:
            self.session = cluster.connect()
        except NoHostAvailable as exc:
            cluster.shutdown()
            errors = getattr(exc, "errors", None) or {}
            reason = str(next(iter(errors.values()), exc)).splitlines()[0][:200]
            raise RequestError(f"cassandra_fetch: cannot reach Cassandra at {self.host}:{self.port}: {reason}",
                               "UNAVAILABLE") from exc
        self.cluster = cluster
        return self.session

    def _reset(self) -> None:
        self.statements.clear()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.shutdown()
        self.cluster = self.session = None

    def _statement(self, session, table: str) -> tuple:
        if table in self.statements:
            return self.statements[table]
        keyspace, name = table.split(".")
        have = {row[0]: row[1] for row in session.execute(
            "SELECT column_name, type FROM system_schema.columns WHERE keyspace_name = %s AND table_name = %s",
            (keyspace, name))}
        if not have:
            raise RequestError(f"cassandra_fetch: table {table} does not exist (ingest a dataset into it first)",
                               "NOT_FOUND")
        id_col, label_col, data_col = (self.columns[k] for k in ("id_col", "label_col", "data_col"))
        for column, cql in ((id_col, "uuid"), (data_col, "blob")):
            if have.get(column) != cql:
                raise RequestError(f"cassandra_fetch: table {table} has no {cql} column '{column}'", "INVALID_ARG")
        with_label = have.get(label_col) == "int"
        columns = [data_col] + ([label_col] if with_label else [])
        prepared = session.prepare(
            f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in columns)} FROM "{keyspace}"."{name}" '
            f'WHERE "{id_col}" = ?'
        )
        self.statements[table] = (prepared, with_label)
        return self.statements[table]

    # ------------------------------------------------------------------------------ requests

    def _table_of(self, request) -> str:
        table = self.table
        try:
            params = json.loads(request.parameters() or "{}")
        except Exception:
            params = {}
        requested = params.get("table")
        if requested:
            if not self.allow_request_table:
                raise RequestError("cassandra_fetch: this model does not accept a table parameter", "INVALID_ARG")
            problem = self._bad_table(str(requested), "request parameter table")
            if problem:
                raise RequestError(problem, "INVALID_ARG")
            table = str(requested)
        return table

    def _parse(self, request) -> tuple[str, list[uuid.UUID]]:
        table = self._table_of(request)
        rows = np.from_dlpack(pb_utils.get_input_tensor_by_name(request, "UUID"))
        if rows.ndim != 2:
            raise RequestError("cassandra_fetch: UUID must be a [batch, n] uint8 tensor", "INVALID_ARG")
        ids = []
        for row in rows:
            raw = row.tobytes()
            if len(raw) == 16:  # 16 raw bytes
                ids.append(uuid.UUID(bytes=raw))
                continue
            text = raw.rstrip(b"\0").decode("ascii", "replace").strip()
            try:
                ids.append(uuid.UUID(text))
            except ValueError:
                raise RequestError(f"cassandra_fetch: malformed UUID {text[:80]!r}", "INVALID_ARG") from None
        return table, ids

    def execute(self, requests):
        responses: list = [None] * len(requests)
        parsed: dict[int, tuple[str, list[uuid.UUID]]] = {}
        for i, request in enumerate(requests):
            try:
                parsed[i] = self._parse(request)
            except RequestError as exc:
                responses[i] = pb_utils.InferenceResponse(error=_error(str(exc), exc.code))
        if not parsed:
            return responses
        with self.lock:
            try:
                rows = self._fetch_all(parsed)
            except RequestError as exc:  # nothing could be read (Cassandra down, no such table ...)
                for i in parsed:
                    responses[i] = pb_utils.InferenceResponse(error=_error(str(exc), exc.code))
                return responses
        for i, (table, ids) in parsed.items():
            responses[i] = self._respond(table, ids, rows)
        return responses

    def _fetch_all(self, parsed: dict) -> dict:
        """(table, uuid) -> (data, label) or an exception, every distinct id read concurrently."""
        try:
            session = self._connect()
        except RequestError:
            self._reset()
            raise
        futures, problems = {}, {}
        for table, ids in parsed.values():
            if table in problems:
                continue
            try:
                statement, with_label = self._statement(session, table)
            except RequestError as exc:
                problems[table] = exc
                continue
            except Exception as exc:  # schema read failed: connection trouble; reconnect next time
                self._reset()
                raise RequestError(f"cassandra_fetch: reading the schema of {table} failed: {_first_line(exc)}",
                                   "UNAVAILABLE") from exc
            for key in ids:
                if (table, key) not in futures:
                    futures[(table, key)] = (session.execute_async(statement, (key,)), with_label)
        rows: dict = {(t, None): exc for t, exc in problems.items()}
        failed = False
        for (table, key), (future, with_label) in futures.items():
            try:
                row = future.result().one()
            except Exception as exc:
                failed = True
                rows[(table, key)] = RequestError(
                    f"cassandra_fetch: reading UUID {key} from {table} failed: {_first_line(exc)}", "UNAVAILABLE")
                continue
            if row is None:
                rows[(table, key)] = RequestError(f"cassandra_fetch: UUID {key} not found in table {table}",
                                                  "NOT_FOUND")
            else:
                label = row[1] if with_label and isinstance(row[1], int) else -1
                rows[(table, key)] = (bytes(row[0] or b""), label)
        if failed:
            self.statements.clear()  # a changed schema invalidates statements; they are prepared again
        return rows

    @staticmethod
    def _respond(table: str, ids: list[uuid.UUID], rows: dict):
        if isinstance(rows.get((table, None)), RequestError):
            exc = rows[(table, None)]
            return pb_utils.InferenceResponse(error=_error(str(exc), exc.code))
        found = []
        for key in ids:
            row = rows[(table, key)]
            if isinstance(row, RequestError):
                return pb_utils.InferenceResponse(error=_error(str(row), row.code))
            found.append(row)
        width = max([1, *(len(data) for data, _ in found)])  # no zero-width tensors
        images = np.zeros((len(found), width), dtype=np.uint8)
        for j, (data, _) in enumerate(found):
            images[j, :len(data)] = np.frombuffer(data, dtype=np.uint8)
        sizes = np.array([[len(data)] for data, _ in found], dtype=np.int64).reshape(-1, 1)
        labels = np.array([[label] for _, label in found], dtype=np.int32).reshape(-1, 1)
        return pb_utils.InferenceResponse(output_tensors=[
            _tensor(name, value)
            for name, value in (("IMAGE", images), ("IMAGE_SIZE", sizes), ("LABEL", labels))
        ])

    def finalize(self):
        self._reset()
