"""Connected clients for every service, each with explicit timeouts so no network call can hang.

One module per service; each client uses the configured login, verifies the stack's CA with
settings.tls, and turns refusals (wrong password, TLS mismatch, untrusted CA, nothing listening)
into one clear line. `via_proxy=True` connects through toxiproxy, where sweeps add latency,
bandwidth limits and faults.
"""

from workbench.clients.cassandra import (
    CassandraLoginRefused,
    cassandra_cluster,
    cassandra_error,
    cassandra_session,
    cassandra_ssl_context,
)
from workbench.clients.ignite import connect_ignite, ignite_client, ignite_options, ignite_tls_options
from workbench.clients.tls import speaks_tls
from workbench.clients.triton import triton_client

__all__ = [
    "CassandraLoginRefused", "cassandra_cluster", "cassandra_error", "cassandra_session", "cassandra_ssl_context",
    "connect_ignite", "ignite_client", "ignite_options", "ignite_tls_options",
    "speaks_tls", "triton_client",
]
