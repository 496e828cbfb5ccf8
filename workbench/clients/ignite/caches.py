"""Caches and partitions of an Ignite cluster: the node's partition templates, a cache's partition count,
its existence, the cluster's server nodes, and the errors pyignite raises for server-side trouble."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from workbench.config import Settings
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from pyignite import Client
    from pyignite import Client as IgniteClient

_PARTS = re.compile(r"parts=(\d+)")  # the partition count in SYS.CACHES.AFFINITY

# Cache templates of the stack's node configuration (`workbench.stack.ignite`): a cache created BY NAME whose
# name starts with `partition_template(n, b)` gets RendezvousAffinityFunction(false, n) and b backups (a thin
# client cannot send an affinity function; the Ignite article's way to choose partitions is a template).
PARTITION_TEMPLATES = tuple(2**k for k in range(16))  # 1 .. 32768 partitions
DEFAULT_PARTITIONS = 1024  # RendezvousAffinityFunction's default: what a cache made without a template gets


def partition_template(partitions: int, backups: int) -> str:
    """The name prefix of the node's cache template with `partitions` partitions and `backups` backups."""
    return f"WB_P{partitions}_B{backups}_"


def template_backups(settings: Settings) -> range:
    """Backups the node's templates are made for: every useful count on this cluster, and the configured one."""
    return range(max(settings.ignite_nodes, settings.ignite_backups + 1))


OP_CLUSTER_GROUP_GET_NODE_IDS = 5100  # Ignite's ClientMessageParser; not among pyignite's op codes


def server_node_count(client: IgniteClient) -> int:
    """How many server nodes the cluster of `client` has now: the thin protocol's cluster-group request for
    the server nodes' ids (the Java thin client's ``ClientCluster.forServers().nodes()``; pyignite has none).
    It answers on an inactive cluster too, where SQL (SYS.NODES) does not."""
    from pyignite.datatypes import Bool, Int, Long, Short
    from pyignite.queries import Query, query_perform

    # topology version -1: always answer; one projection item, kind 2 (server or client nodes), true: servers
    fields = [("top_ver", Long), ("items", Int), ("kind", Short), ("servers", Bool)]
    result = query_perform(Query(OP_CLUSTER_GROUP_GET_NODE_IDS, fields), client.random_node,
                           query_params={"top_ver": -1, "items": 1, "kind": 2, "servers": True},
                           response_config=[("changed", Bool), ("top_ver", Long), ("count", Int)])
    if result.status != 0:
        raise WorkbenchError(f"Ignite could not list its server nodes: {str(result.message).splitlines()[0][:200]}")
    return int(result.value["count"])


def ignite_errors() -> tuple[type[BaseException], ...]:
    """What pyignite raises for server-side failures, lost connections and protocol trouble."""
    from pyignite.exceptions import CacheError, ParameterError, ParseError, ReconnectError, connection_errors

    return (CacheError, ParameterError, ParseError, ReconnectError, *connection_errors)


def require_cache(client: Client, cache_name: str, where: str, hint: str = "") -> None:
    names = client.get_cache_names()
    if cache_name not in names:
        known = ", ".join(sorted(n for n in names if not n.startswith("ignite-sys")))[:300] or "none"
        raise WorkbenchError(
            f"Ignite cache {cache_name} does not exist at {where} (caches: {known})"
            + (f": {hint}" if hint else "")
        )


def partition_count(client: Client, cache_name: str, fallback: int | None = None) -> int:
    """Partitions of a cache: the affinity mapping (what partition awareness uses), else SYS.CACHES."""
    from pyignite.api.affinity import cache_get_node_partitions
    from pyignite.utils import cache_id

    cid = cache_id(cache_name)
    try:
        result = cache_get_node_partitions(client.random_node, cid)
        if result.status == 0:
            mapping = result.value["partition_mapping"].get(cid) or {}
            if mapping.get("number_of_partitions"):
                return int(mapping["number_of_partitions"])
    except ignite_errors():
        pass
    try:
        with client.sql("SELECT AFFINITY FROM SYS.CACHES WHERE CACHE_NAME = ?", query_args=[cache_name]) as cur:
            rows = list(cur)
        if rows and (m := _PARTS.search(str(rows[0][0]))):
            return int(m.group(1))
    except ignite_errors():
        pass
    if fallback:
        return fallback
    raise WorkbenchError(f"cannot learn the partition count of Ignite cache {cache_name}")
