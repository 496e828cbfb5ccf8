"""Triton requests fed from remote storage: the wire format, one request, and its one-line errors.

Two ways to feed the same preprocess (DALI) + classifier (torch) graph:

* ``ensemble``: the client reads each sample with a registered loader (Cassandra, S3, Ignite, local
  files ...) and sends the encoded bytes;
* ``cass_to_inference``: the client sends only the sample's UUID; the server reads the blob from
  Cassandra itself (`cassandra_fetch`), as in cassandra-dali-plugin's Triton example.

Wire format (why not TYPE_STRING: see triton_models/preprocess/config.pbtxt): images go as zero-padded
uint8 rows plus their lengths (`pack_images`), UUIDs as their text in uint8 rows (`pack_uuids`).
The measured sweep is `workbench.bench.inference`; its command line `workbench.cli_inference`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.backends import locate
from workbench.clients import speaks_tls, triton_client
from workbench.clients.endpoints import triton_address, where
from workbench.config import Settings
from workbench.errors import WorkbenchError

# model -> (what the client sends, outputs a sweep asks for)
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ensemble": ("bytes", ("CLASS",)),
    "cass_to_inference": ("uuid", ("CLASS",)),
    "preprocess": ("bytes", ("DECODE_DEVICE",)),
}
PROTOCOLS = ("http", "grpc")
NP_TO_TRITON = {np.dtype(np.uint8): "UINT8", np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32",
                np.dtype(np.object_): "BYTES",
                np.dtype(np.float32): "FP32"}


class InferenceError(WorkbenchError):
    """Triton answered a request with an error (the server's message, which names the model and cause)."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------ wire format


def pack_images(blobs: Sequence[bytes]) -> dict[str, np.ndarray]:
    """IMAGE [batch, longest] uint8 (zero-padded rows) and IMAGE_SIZE [batch, 1] int64."""
    if not blobs:
        raise WorkbenchError("no images to send")
    sizes = np.array([[len(b)] for b in blobs], dtype=np.int64)
    rows = np.zeros((len(blobs), max(1, int(sizes.max()))), dtype=np.uint8)
    for i, blob in enumerate(blobs):
        rows[i, :len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    return {"IMAGE": rows, "IMAGE_SIZE": sizes}


def pack_uuids(keys: Sequence[str | uuid.UUID]) -> dict[str, np.ndarray]:
    """UUID [batch, longest] uint8: each key's text, NUL-padded (canonical UUIDs are all 36 bytes)."""
    if not keys:
        raise WorkbenchError("no UUIDs to send")
    texts = [str(k).encode("utf-8") for k in keys]
    rows = np.zeros((len(texts), max(1, max(map(len, texts)))), dtype=np.uint8)
    for i, text in enumerate(texts):
        rows[i, :len(text)] = np.frombuffer(text, dtype=np.uint8)
    return {"UUID": rows}


def input_kind(model: str) -> str:
    if model not in MODELS:
        raise WorkbenchError(f"unknown inference model '{model}': choose from {', '.join(MODELS)}")
    return MODELS[model][0]


def check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise WorkbenchError(f"unknown Triton protocol '{protocol}': use http or grpc")
    return protocol


def client_module(protocol: str, aio: bool = False):
    if protocol == "http":
        if aio:
            import tritonclient.http.aio as module
        else:
            import tritonclient.http as module
    else:
        if aio:
            import tritonclient.grpc.aio as module
        else:
            import tritonclient.grpc as module
    return module


def tensors(module, arrays: dict[str, np.ndarray]) -> list:
    tensors = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), NP_TO_TRITON[array.dtype])
        tensor.set_data_from_numpy(np.ascontiguousarray(array))
        tensors.append(tensor)
    return tensors


# How gRPC reports a connection that failed before any model saw the request (refused, closed, TLS).
_NOT_CONNECTED = ("failed to connect to all addresses", "connections to all backends failing")


def server_error(exc: Exception, model: str, protocol: str, settings: Settings | None = None,
                  via_proxy: bool = False) -> InferenceError:
    """The server's answer as an InferenceError; a failed connection or a deadline (with `settings`) as one
    clear line naming host:port."""
    message = str(exc.message() if hasattr(exc, "message") and callable(exc.message) else exc)
    status = exc.status() if hasattr(exc, "status") and callable(exc.status) else None
    if settings is not None and message.lower().startswith(_NOT_CONNECTED):
        return InferenceError(_unreachable(settings, protocol, via_proxy, message), status)
    if settings is not None and str(status).endswith("DEADLINE_EXCEEDED"):
        server = where([triton_address(settings, protocol, via_proxy)])
        return InferenceError(f"Triton {model} over {protocol} at {server}: no answer before the deadline ({message}); "
                              "is the server overloaded or stuck? (the timeout is WORKBENCH_TIMEOUT_S)", status)
    return InferenceError(f"Triton {model} over {protocol}: {message}", status)


def _unreachable(settings: Settings, protocol: str, via_proxy: bool, message: str) -> str:
    """Why Triton could not be reached and what to do: untrusted certificate, TLS mismatch, or down."""

    host, port = triton_address(settings, protocol, via_proxy)
    where = f"{host}:{port}"
    reason = message.split("last error: ")[-1].splitlines()[0][:200]
    text = message.lower()
    if "certificate" in text:
        return (f"cannot verify the TLS certificate of Triton at {where} over {protocol} ({reason}): set "
                "WORKBENCH_TLS_CA_FILE to the CA that signed it")
    tls = protocol == "grpc" and settings.tls
    if protocol == "grpc" and ("closed" in text or "handshake" in text):
        speaks = speaks_tls(host, port, min(settings.timeout_s, 5.0))
        if tls and not speaks:
            return (f"TLS handshake with Triton at {where} over grpc failed ({reason}): the server does not speak "
                    "TLS on that port; set WORKBENCH_TLS to match the server's --grpc-use-ssl")
        if not tls and speaks:
            return (f"Triton at {where} over grpc closed the connection ({reason}): the port speaks TLS; set "
                    "WORKBENCH_TLS=1 (and WORKBENCH_TLS_CA_FILE to its CA)")
    return (f"cannot reach Triton at {where} over {protocol}{' with TLS' if tls else ''}: {reason}; is the stack "
            "up? (`workbench stack status`; WORKBENCH_TLS must match the server's gRPC TLS)")


# ------------------------------------------------------------------------------------ one request


def infer(settings: Settings, model: str, inputs: dict[str, np.ndarray], protocol: str = "http",
          outputs: Sequence[str] | None = None, parameters: dict[str, Any] | None = None,
          via_proxy: bool = False) -> dict[str, np.ndarray]:
    """One synchronous request; outputs by name. A server-side error raises InferenceError."""
    from tritonclient.utils import InferenceServerException


    module = client_module(check_protocol(protocol))
    client = triton_client(settings, protocol, via_proxy)
    requested = [module.InferRequestedOutput(name) for name in outputs] if outputs else None
    kwargs = {"client_timeout": settings.timeout_s} if protocol == "grpc" else {}
    try:
        result = client.infer(model, tensors(module, inputs), outputs=requested, parameters=parameters, **kwargs)
    except InferenceServerException as exc:
        raise server_error(exc, model, protocol, settings, via_proxy) from exc
    finally:
        with contextlib.suppress(Exception):
            client.close()
    response = result.get_response(as_json=True) if protocol == "grpc" else result.get_response()
    return {out["name"]: result.as_numpy(out["name"]) for out in response["outputs"]}


def classify_images(settings: Settings, blobs: Sequence[bytes], protocol: str = "http",
                    model: str = "ensemble", via_proxy: bool = False) -> dict[str, np.ndarray]:
    """CLASS [n] and LOGITS [n, classes] for encoded images, through the byte-fed ensemble."""
    out = infer(settings, model, pack_images(blobs), protocol, via_proxy=via_proxy)
    return {"CLASS": out["CLASS"].reshape(-1), "LOGITS": out["LOGITS"]}


def classify_uuids(settings: Settings, keys: Sequence[str | uuid.UUID], protocol: str = "http",
                   table: str | None = None, model: str = "cass_to_inference",
                   via_proxy: bool = False) -> dict[str, np.ndarray]:
    """CLASS, LOGITS and LABEL for samples Triton reads from Cassandra (`table`: keyspace.table, else the
    model's default)."""
    parameters = {"table": table} if table else None
    out = infer(settings, model, pack_uuids(keys), protocol, parameters=parameters, via_proxy=via_proxy)
    return {"CLASS": out["CLASS"].reshape(-1), "LOGITS": out["LOGITS"], "LABEL": out["LABEL"].reshape(-1)}


def cassandra_table(settings: Settings, dataset: str, split: str = "train") -> str | None:
    """The Cassandra data table holding `dataset`'s `split` (from the catalog), if it is there."""
    try:
        return locate(settings, "cassandra", dataset).get("tables", {}).get(split)
    except Exception:  # not ingested into Cassandra / Cassandra unreachable: the model's default table
        return None
