"""The network of one sweep point: RTT and jitter from toxiproxy, bandwidth per connection or per link.

Why two bandwidth scopes: toxiproxy's bandwidth toxic caps each connection, so a client with 32 connections
moves 32 times the "bandwidth" (a per-flow limit, as a long fat pipe gives one TCP window). A link, as in the
cassandra-dali-plugin's long-fat-network question, is shared by every connection to a host: with the stack's
nodes in network namespaces (node_network=netns, `workbench.net.netns`), scope `link` re-caps each node's
veth (tbf both ways) for the point and leaves toxiproxy with the round-trip time only.
"""

from __future__ import annotations

from typing import Literal

from workbench.backends import backend_class
from workbench.bench.points import SweepPoint
from workbench.config import PROXIED, Settings
from workbench.errors import WorkbenchError
from workbench.net import netns
from workbench.net.toxiproxy import Toxiproxy

Scope = Literal["connection", "link"]
SCOPES: tuple[Scope, ...] = ("connection", "link")
RATE_TOLERANCE = 0.01  # tc reports the rate it rounded to


def stack_hosts(settings: Settings) -> int:
    """How many hosts the local stack's nodes take (node k of every service shares host k)."""
    return max(settings.nodes_of(path) for path in PROXIED)


def link_namespaces(settings: Settings) -> list[str]:
    """The namespaces whose links scope `link` caps; a one-line error where the nodes are not in any."""
    names = [name for node in range(stack_hosts(settings)) if (name := settings.node_namespace(node))]
    if not names:
        raise WorkbenchError(
            "bandwidth_scope: link caps the nodes' own links, but this stack's nodes are not in network "
            "namespaces: run `WORKBENCH_NODE_NETWORK=netns workbench stack up` as root, or use "
            "bandwidth_scope: connection (toxiproxy's per-connection cap)")
    return names


def set_network(settings: Settings, toxiproxy: Toxiproxy, point: SweepPoint, jitter_ms: float,
                scope: Scope = "connection") -> None:
    """The point's network on every proxy of every path (one per node of a clustered service), and with scope
    `link` the point's bandwidth on every node's link instead (0: uncapped)."""
    per_connection_kbps = point.bandwidth_mbps * 1000 if scope == "connection" else 0
    if scope == "link":
        link_namespaces(settings)
        capped = settings.model_copy(update={"node_bandwidth_mbps": point.bandwidth_mbps})
        netns.ensure(capped, stack_hosts(settings))
    for path in PROXIED:
        for proxy in settings.proxy_names(path):
            toxiproxy.set_network(proxy, rtt_ms=point.rtt_ms, jitter_ms=jitter_ms, bandwidth_kbps=per_connection_kbps)


def check_network(settings: Settings, toxiproxy: Toxiproxy, backend: str, point: SweepPoint, jitter_ms: float,
                  scope: Scope = "connection") -> None:
    """Raise if any proxy of the backend's path, or with scope `link` any node's cap, lost the point's network
    during the measurement (someone reset toxiproxy or re-shaped a link)."""
    if (path := backend_class(backend).proxy) is not None:
        per_connection_kbps = point.bandwidth_mbps * 1000 if scope == "connection" else 0
        for proxy in settings.proxy_names(path):
            toxiproxy.check_network(proxy, point.rtt_ms, jitter_ms, per_connection_kbps)
    if scope == "link":
        want = point.bandwidth_mbps * 1e6
        for namespace in link_namespaces(settings):
            rates = netns.shaping(namespace)
            if not rates_match(rates, want):
                raise WorkbenchError(f"the link cap of {namespace} changed during the point: tc shows "
                                     f"{rates or 'no cap'}, the point wants {want:.0f} bit/s each way")


def rates_match(rates: dict[str, int], want_bits: float) -> bool:
    """Whether tc's tbf rates (bit/s per device) are the cap `want_bits` each way (0: no tbf at all)."""
    if want_bits <= 0:
        return not rates
    return len(rates) == 2 and all(abs(rate - want_bits) <= RATE_TOLERANCE * want_bits for rate in rates.values())
