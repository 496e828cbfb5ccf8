"""`WORKBENCH_STACK=external`: clusters run elsewhere (Kubernetes, VMs); the workbench only connects.

`status` sends a real request to every listed endpoint of every service (WORKBENCH_CASSANDRA_CONTACT_POINTS,
WORKBENCH_S3_ENDPOINTS, WORKBENCH_IGNITE_ADDRESSES, WORKBENCH_TRITON_URLS; a service without a list: its one
configured address), through the same client builders the loaders use (login, TLS, timeouts), and names each
endpoint that does not answer with host:port and why. Nothing is started or stopped here.

`bootstrap` is the one write: the first contact with a fresh cluster does what the local stack's start does and
the operators do not (cass-operator and the MinIO operator create their logins from the Secrets that
`workbench stack k8s` writes; Ignite has no operator).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pydantic import SecretStr

from workbench.clients import cassandra_session, connect_ignite, ignite_client, ignite_options, triton_client
from workbench.clients.endpoints import (
    Address,
    TritonServer,
    cassandra_points,
    ignite_points,
    s3_points,
    triton_servers,
    where,
)
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.stack.ignite import DEFAULT_PASSWORD, DEFAULT_USER, activate, retire_default_login
from workbench.stack.manager import ServiceStatus
from workbench.storage.s3 import BotoS3Store


@dataclass(frozen=True)
class Target:
    """One endpoint to probe: the service, its node name (`cassandra-2`), where, and the settings naming only it."""

    service: str
    node_name: str
    address: Address
    settings: Settings
    protocol: str = ""


def targets(settings: Settings) -> list[Target]:
    """Every endpoint of every service, each with settings that point its client at that endpoint alone."""
    found: list[Target] = []

    def add(service: str, addresses: list[Address], field: str, entries: list[str], protocol: str = "") -> None:
        for k, (address, entry) in enumerate(zip(addresses, entries, strict=True)):
            node = service if k == 0 else f"{service}-{k + 1}"
            found.append(Target(service, node, address, settings.model_copy(update={field: [entry]}), protocol))

    cassandra = cassandra_points(settings)
    add("cassandra", cassandra, "cassandra_contact_points", [where([a]) for a in cassandra])
    s3 = s3_points(settings)
    add("s3", [address for _, address in s3], "s3_endpoints", [url for url, _ in s3])
    ignite = ignite_points(settings)
    add("ignite", ignite, "ignite_addresses", [where([a]) for a in ignite])
    ports = {"http": settings.triton_http_port, "grpc": settings.triton_grpc_port}
    for k, server in enumerate(triton_servers(settings) or [TritonServer(settings.host, ports, "http")]):
        address = server.address(server.listed)
        found.append(Target("triton", "triton" if k == 0 else f"triton-{k + 1}", address, settings.model_copy(
            update={"triton_urls": [f"{server.listed}://{where([address])}"]}), server.listed))
    return found


def _cassandra(target: Target) -> tuple[str, str]:
    with cassandra_session(target.settings) as session:
        version = session.execute("SELECT release_version FROM system.local").one()[0]
        hosts = list(session.cluster.metadata.all_hosts())
    down = sorted(where([(h.address, h.endpoint.port)]) for h in hosts if not h.is_up)
    ring = f"ring: {len(hosts)} node(s), {len(hosts) - len(down)} up" + (f"; down: {', '.join(down)}" if down else "")
    return f"Cassandra {version}", ring


def _s3(target: Target) -> tuple[str, str]:
    settings = target.settings
    store = BotoS3Store(settings, settings.s3_bucket)
    present = store.bucket_exists()
    return "S3", f"bucket '{settings.s3_bucket}' " + ("present" if present else "not created yet (ingest creates it)")


def _ignite(target: Target) -> tuple[str, str]:
    settings = target.settings
    settings.check_credentials()
    client = connect_ignite(*target.address, ignite_options(settings))
    try:
        version = ".".join(str(v) for v in client.protocol_context.version)
        caches = [name for name in client.get_cache_names() if not name.startswith("ignite-sys")]
    finally:
        client.close()
    return f"Ignite (thin protocol {version})", f"{len(caches)} cache(s)"


def _triton(target: Target) -> tuple[str, str]:
    client = triton_client(target.settings, target.protocol)
    try:
        ready = client.is_server_ready()
        metadata = client.get_server_metadata() if ready else None
    except Exception as exc:  # tritonclient raises its own errors over gRPC, the socket's over HTTP
        raise WorkbenchError(f"cannot reach Triton at {where([target.address])} over {target.protocol}: "
                             f"{first_line(exc)}") from exc
    finally:
        client.close()
    if metadata is None:
        raise WorkbenchError(f"Triton at {where([target.address])} over {target.protocol} answers but is not "
                             "ready (models still loading?)")
    version = metadata["version"] if isinstance(metadata, dict) else metadata.version
    return f"Triton {version}", f"{target.protocol} ready"


PROBES: dict[str, Callable[[Target], tuple[str, str]]] = {
    "cassandra": _cassandra, "s3": _s3, "ignite": _ignite, "triton": _triton,
}


def probe(target: Target) -> ServiceStatus:
    """One endpoint's row: healthy with its version, or unhealthy with one line naming host:port and why."""
    address = where([target.address])
    try:
        version, detail = PROBES[target.service](target)
    except Exception as exc:  # any failure of a probe means "not healthy", with the reason
        text = first_line(exc, 300)
        return ServiceStatus(target.node_name, "", address, False, None,
                             text if address in text else f"{address}: {text}")
    return ServiceStatus(target.node_name, version, address, True, None, detail)


def status(settings: Settings, names: list[str] | None = None) -> list[ServiceStatus]:
    """Probe every endpoint of the selected services (names: `cassandra`, or one node such as `cassandra-2`)."""
    every = targets(settings)
    known = {t.service for t in every} | {t.node_name for t in every}
    unknown = sorted(set(names or []) - known)
    if unknown:
        raise WorkbenchError(f"unknown service(s) {', '.join(unknown)} of the external stack: choose from "
                             f"{', '.join(sorted(known))}")
    chosen = [t for t in every if not names or t.service in names or t.node_name in names]
    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
        return list(pool.map(probe, chosen))


def unreachable(rows: list[ServiceStatus]) -> str:
    """One line naming every endpoint that did not answer ('' when all did)."""
    bad = [f"{row.service} {row.address}" for row in rows if not row.healthy]
    return f"not answering: {', '.join(bad)}" if bad else ""


def _bootstrap_ignite(settings: Settings) -> str:
    """Activate a fresh Ignite cluster once WORKBENCH_IGNITE_NODES server nodes joined (a persistent cluster's
    baseline is then all of them), create the configured login with the default one and retire the default
    (`retire_default_login`, as the local stack does). A cluster whose default login is refused is done already."""
    default = settings.model_copy(update={"ignite_username": DEFAULT_USER,
                                          "ignite_password": SecretStr(DEFAULT_PASSWORD), "dev_mode": True})
    try:
        with ignite_client(default) as client:
            activate(client, settings.ignite_nodes)
    except WorkbenchError as exc:
        if "refused the login" not in str(exc):
            raise
        with ignite_client(settings):  # the configured login must work instead
            return "Ignite: the configured login is in place already"
    retire_default_login(settings)
    return f"Ignite: cluster active, login '{settings.ignite_username}' created, the default login retired"


def bootstrap(settings: Settings, wait_s: float = 0.0, interval_s: float = 5.0) -> list[str]:
    """First contact with a fresh external cluster (idempotent); tries again until `wait_s` has passed while
    the cluster is still forming (nodes joining, services not answering yet). Returns what it did."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return [_bootstrap_ignite(settings)]
        except WorkbenchError:
            if time.monotonic() + interval_s > deadline:
                raise
            time.sleep(interval_s)
