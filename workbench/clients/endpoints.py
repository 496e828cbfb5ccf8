"""Where each service's clients connect: an external cluster's endpoint lists when set, else host and port.

Why one module: every client builder (both Cassandra drivers, pyignite, tritonclient) and
`workbench stack status` must agree on the addresses. With the lists set (WORKBENCH_CASSANDRA_CONTACT_POINTS,
WORKBENCH_IGNITE_ADDRESSES, WORKBENCH_TRITON_URLS; S3 URLs in `Settings.s3_endpoint`) the clients connect to
those nodes directly: toxiproxy's emulation belongs to the local and compose stacks, so `via_proxy` is ignored.
Without them, a service's address is `host` (node k of a local cluster: `node_host(k)`) at its port.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from workbench.config import Settings, rank_choice
from workbench.errors import WorkbenchError

Address = tuple[str, int]
TRITON_PROTOCOLS = ("http", "grpc")


def parse_address(text: str, default_port: int, setting: str) -> Address:
    """(host, port) of `host`, `host:port`, `[v6]` or `[v6]:port`; bad input is one line naming the setting."""
    value = text.strip()
    host, port_text = value, None
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise _bad(setting, text, "an IPv6 address goes in brackets: [::1]:9042")
        port_text = rest[1:] if rest else None
    elif value.count(":") == 1:
        host, _, port_text = value.partition(":")
    elif value.count(":") > 1:
        try:
            ipaddress.IPv6Address(value)
        except ValueError:
            raise _bad(setting, text, "write host:port, or [v6]:port for an IPv6 address") from None
    if not host or any(c.isspace() or c in "/@" for c in host):
        raise _bad(setting, text, "write host or host:port (no scheme, no path)")
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _bad(setting, text, "the port must be a number from 1 to 65535")
    return host, int(port_text)


def _bad(setting: str, text: str, hint: str) -> WorkbenchError:
    return WorkbenchError(f"WORKBENCH_{setting.upper()}: {text!r} is not an address: {hint}")


def where(addresses: list[Address]) -> str:
    """`host:port, host:port` for messages ([v6]:port for IPv6)."""
    return ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in addresses)


def _local_nodes(settings: Settings, path: str, via_proxy: bool) -> list[Address]:
    port = settings.port(path, via_proxy)
    host = settings.proxy_host if via_proxy else settings.node_host  # proxies listen on the host side
    return [(host(node), port) for node in range(settings.nodes_of(path))]


def cassandra_points(settings: Settings, via_proxy: bool = False) -> list[Address]:
    """Contact points of the Cassandra cluster (a port left out is WORKBENCH_CASSANDRA_PORT)."""
    if settings.cassandra_contact_points:
        return [parse_address(p, settings.cassandra_port, "cassandra_contact_points")
                for p in settings.cassandra_contact_points]
    return _local_nodes(settings, "cassandra", via_proxy)


def cassandra_hosts(settings: Settings, via_proxy: bool = False) -> tuple[list[str], int]:
    """(hosts, port) for the drivers that take one port for every contact point (acsylla, as the C++ driver)."""
    points = cassandra_points(settings, via_proxy)
    ports = {port for _, port in points}
    if len(ports) > 1:
        raise WorkbenchError(
            f"WORKBENCH_CASSANDRA_CONTACT_POINTS use different ports ({where(points)}): the Cassandra drivers take "
            "one native port for the whole cluster; list the nodes with the same port")
    return [host for host, _ in points], ports.pop()


def ignite_points(settings: Settings, via_proxy: bool = False) -> list[Address]:
    """Thin-client addresses of the Ignite cluster (a port left out is WORKBENCH_IGNITE_PORT)."""
    if settings.ignite_addresses:
        return [parse_address(a, settings.ignite_port, "ignite_addresses") for a in settings.ignite_addresses]
    return _local_nodes(settings, "ignite", via_proxy)


@dataclass(frozen=True)
class TritonServer:
    """One Triton server of WORKBENCH_TRITON_URLS: `host[:port]` or `http://host[:port]` names its HTTP
    endpoint, `grpc://host[:port]` its gRPC endpoint; the other protocol is on the same host at its usual port."""

    host: str
    ports: dict[str, int]
    listed: str  # the protocol the entry names

    def address(self, protocol: str) -> Address:
        return self.host, self.ports[protocol]


def triton_servers(settings: Settings) -> list[TritonServer]:
    servers = []
    for entry in settings.triton_urls:
        scheme, sep, rest = entry.strip().partition("://")
        protocol, text = (scheme.lower(), rest) if sep else ("http", entry)
        if protocol not in TRITON_PROTOCOLS:
            raise _bad("triton_urls", entry, "use host:port, http://host:port or grpc://host:port")
        ports = {"http": settings.triton_http_port, "grpc": settings.triton_grpc_port}
        host, ports[protocol] = parse_address(text.rstrip("/"), ports[protocol], "triton_urls")
        servers.append(TritonServer(host, ports, protocol))
    return servers


def triton_address(settings: Settings, protocol: str, via_proxy: bool = False) -> Address:
    """The Triton server this process talks to: with WORKBENCH_TRITON_URLS one per client rank (ranks spread
    over the servers as a load balancer would), else host at the protocol's port."""
    if protocol not in TRITON_PROTOCOLS:
        raise WorkbenchError(f"unknown Triton protocol '{protocol}': use http or grpc")
    servers = triton_servers(settings)
    if servers:
        return rank_choice(servers).address(protocol)
    return settings.host, settings.port(f"triton_{protocol}", via_proxy)


def s3_points(settings: Settings) -> list[tuple[str, Address]]:
    """(URL, (host, port)) of every endpoint of WORKBENCH_S3_ENDPOINTS (else the configured one)."""
    urls = settings.s3_endpoints or [settings.s3_endpoint()]
    points = []
    for url in urls:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
            raise _bad("s3_endpoints", url, "write an endpoint URL such as https://minio.example:9000")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise _bad("s3_endpoints", url, "the port must be a number from 1 to 65535") from None
        points.append((url.strip(), (parts.hostname, port)))
    return points
