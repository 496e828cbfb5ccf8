"""pyignite thin clients with timeouts, the configured login and SSL; one clear line for every refusal.

One job per module: `connect` (login, TLS options, connecting), `diagnose` (why a connect failed), `endpoints`
(Endpoint, per-thread clients), `caches` (templates, partitions), `scans`, `get_all` and `wire` (answers read
with struct), `framing` (the asyncio protocol replacement), `aio` (shared asyncio clients). This module only
re-exports their names, so ``from workbench.clients.ignite import X`` keeps working.
"""

from workbench.clients.ignite.aio import AioClients
from workbench.clients.ignite.caches import (
    DEFAULT_PARTITIONS,
    OP_CLUSTER_GROUP_GET_NODE_IDS,
    PARTITION_TEMPLATES,
    ignite_errors,
    partition_count,
    partition_template,
    require_cache,
    server_node_count,
    template_backups,
)
from workbench.clients.ignite.connect import (
    check_tls_files,
    connect_failure,
    connect_ignite,
    ignite_client,
    ignite_client_auth,
    ignite_options,
    ignite_tls_options,
    stack_client_certificate,
)
from workbench.clients.ignite.diagnose import CERTIFICATE_HINT, wants_client_certificate
from workbench.clients.ignite.endpoints import Endpoint, ThreadClients, ca_file_of, close_quietly, settings_endpoint
from workbench.clients.ignite.framing import framed_protocol, use_framed_protocol
from workbench.clients.ignite.get_all import FastGetAll, Fields, schema_names, schema_names_async
from workbench.clients.ignite.scans import (
    SCAN_ATTEMPTS,
    SCAN_PAUSE_S,
    UnusualScan,
    scan_cursor,
    scan_scalars,
    scan_whole,
)

__all__ = [
    "CERTIFICATE_HINT", "DEFAULT_PARTITIONS", "OP_CLUSTER_GROUP_GET_NODE_IDS", "PARTITION_TEMPLATES", "SCAN_ATTEMPTS",
    "SCAN_PAUSE_S", "AioClients", "Endpoint", "FastGetAll", "Fields", "ThreadClients", "UnusualScan", "ca_file_of",
    "check_tls_files", "close_quietly", "connect_failure", "connect_ignite", "framed_protocol", "ignite_client",
    "ignite_client_auth", "ignite_errors", "ignite_options", "ignite_tls_options", "partition_count",
    "partition_template", "require_cache", "scan_cursor", "scan_scalars", "scan_whole", "schema_names",
    "schema_names_async", "server_node_count", "settings_endpoint", "stack_client_certificate", "template_backups",
    "use_framed_protocol", "wants_client_certificate",
]
