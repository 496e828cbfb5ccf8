"""tritonclient HTTP and gRPC clients (gRPC over TLS with settings.tls), every call with a deadline."""

from __future__ import annotations

from workbench.clients.endpoints import triton_address, where
from workbench.config import Settings
from workbench.errors import WorkbenchError


def triton_client(settings: Settings, protocol: str = "http", via_proxy: bool = False, aio: bool = False,
                  timeout_s: float | None = None, connections: int = 100):
    """A tritonclient (asyncio's with `aio`) for HTTP or gRPC; every call it makes has a deadline.

    gRPC uses TLS with settings.tls (the server verified against the stack's CA). Triton's HTTP endpoint
    has no TLS of its own: it stays plain, bound to settings.host (127.0.0.1 by default). The server is
    `triton_address`'s: with WORKBENCH_TRITON_URLS one of those per client rank.
    `connections` bounds the asyncio HTTP client's connection pool.
    """
    timeout = timeout_s or settings.timeout_s
    url = where([triton_address(settings, protocol, via_proxy)])
    if protocol == "http":
        if aio:
            import tritonclient.http.aio as aio_http

            return aio_http.InferenceServerClient(url, conn_limit=connections, conn_timeout=timeout)
        import tritonclient.http as http

        return http.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    if protocol == "grpc":
        if aio:
            import tritonclient.grpc.aio as module
        else:
            import tritonclient.grpc as module
        tls = {"ssl": True, "root_certificates": str(settings.ca_file())} if settings.tls else {}
        return module.InferenceServerClient(url, channel_args=_grpc_channel_args(timeout), **tls)
    raise WorkbenchError(f"unknown Triton protocol '{protocol}': use http or grpc")

def _grpc_channel_args(timeout_s: float) -> list[tuple[str, object]]:
    """tritonclient's default channel arguments plus a default deadline for every call (gRPC service config).

    Why: tritonclient's gRPC calls wait forever unless each passes client_timeout; with this a call
    without one (a TLS mismatch, a stuck server) still ends after `timeout_s` with DEADLINE_EXCEEDED.
    """
    import json

    from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions

    keepalive = KeepAliveOptions()
    deadline = {"methodConfig": [{"name": [{"service": "inference.GRPCInferenceService"}],
                                  "timeout": f"{timeout_s:.3f}s"}]}
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.service_config", json.dumps(deadline)),
    ]
