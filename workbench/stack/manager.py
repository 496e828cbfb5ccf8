"""Bring the local stack up and down: provision, start, wait for health, report.

`up` is idempotent (a healthy service is left alone), one failing service never stops the others,
and `down` stops exactly the processes recorded in pid files.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.net import netns
from workbench.stack.ceilings import provision_ceilings  # the native ceilings of the provisioned services
from workbench.stack.process import ManagedProcess
from workbench.stack.registry import SERVICES
from workbench.stack.service import Health, Service
from workbench.stack.tls import ensure_certificates  # cryptography is needed only with TLS

MAX_NODES = 16  # the largest node count the topology settings allow (s3_nodes)


@dataclass
class ServiceStatus:
    service: str
    version: str
    address: str
    healthy: bool
    pid: int | None
    detail: str = ""


def select(settings: Settings, names: list[str] | None = None) -> list[Service]:
    """Every node of the named services (a service's name selects all its nodes, `cassandra-2` one node)."""
    nodes = [cls(settings, node) for cls in SERVICES.values() for node in range(cls.node_count(settings))]
    known = set(SERVICES) | {n.node_name for n in nodes}
    unknown = sorted(set(names or []) - known)
    if unknown:
        raise WorkbenchError(f"unknown service(s) {', '.join(unknown)}: choose from {', '.join(sorted(known))}")
    return [n for n in nodes if not names or n.name in names or n.node_name in names]


def nodes_behind(settings: Settings, path: str) -> list[Service]:
    """The stack's nodes that a toxiproxy path's proxies forward to, node k behind proxy k (`proxy_names`).

    Found by address: a node serves the path when the proxy's upstream (`node_host(k)`, the path's port) is one
    of its ports, so whoever strikes a path's cluster (chaos node faults) never spells a service's name."""
    nodes = select(settings)
    behind = []
    for k in range(settings.nodes_of(path)):
        upstream = (settings.node_host(k), settings.port(path))
        found = [n for n in nodes if n.node == k and upstream in {(n.node_host, p) for p in n.ports().values()}]
        if not found:
            raise WorkbenchError(f"no node of the stack serves {path} at {upstream[0]}:{upstream[1]} (node {k + 1}): "
                                 "check the port settings of that service")
        behind.append(found[0])
    return behind


def process_of(service: Service) -> ManagedProcess:
    return ManagedProcess(service.node_name, service.settings.state_dir / "run")


def status_of(service: Service, health: Health | None = None) -> ServiceStatus:
    health = health or service.health()
    return ServiceStatus(service.node_name, health.version or service.version, service.address(), health.healthy,
                         process_of(service).pid(), health.detail)


def _prepare(service: Service) -> str | None:
    """Provision (toolchains are needed only to download or build); the error, or None when ready."""
    try:
        service.provision()
    except WorkbenchError as exc:
        return f"{service.name}: {exc}"
    return None


def _one_per_service(services: list[Service]) -> list[Service]:
    """One node of each service: artifacts are per service, not per node."""
    return list({s.name: s for s in reversed(services)}.values())[::-1]


def _poll(service: Service, ready: Callable[[], bool]) -> Literal["ready", "exited", "timeout"]:
    """Ask `ready` every second until it says yes, `service`'s process is gone, or its start-up timeout passed."""
    process = process_of(service)
    deadline = time.monotonic() + service.startup_timeout_s
    while not ready():
        if process.pid() is None:
            return "exited"
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(1.0)
    return "ready"


def _wait_healthy(service: Service) -> Health:
    process = process_of(service)
    checks: list[Health] = []

    def healthy() -> bool:
        checks.append(service.health())
        return checks[-1].healthy

    outcome = _poll(service, healthy)
    health = checks[-1]
    if outcome == "exited":
        last = process.tail(3).replace("\n", " | ")
        return Health(False, detail=f"exited during start-up; log {process.log_file}: {last[-300:]}")
    if outcome == "timeout":
        health.detail = f"not healthy after {service.startup_timeout_s:.0f}s ({health.detail}); see {process.log_file}"
    return health


def _wait_joinable(first: Service) -> str | None:
    """Wait until node 0 lets the other nodes join (`Service.joinable`); why not, when it never does."""
    outcome = _poll(first, first.joinable)
    log = process_of(first).log_file
    if outcome == "exited":
        return f"not started: {first.node_name}, which it joins, is not running (see {log})"
    if outcome == "timeout":
        return (f"not started: {first.node_name}, which it joins, was not ready for it after "
                f"{first.startup_timeout_s:.0f}s (see {log})")
    return None


def up(settings: Settings, names: list[str] | None = None) -> list[ServiceStatus]:
    """Provision and start the selected services, wait until healthy, and return their status."""
    if settings.stack != "local":
        raise WorkbenchError(f"stack mode is '{settings.stack}': the CLI only manages services with --stack local")
    settings.check_credentials()
    services = select(settings, names)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    netns.ensure(settings, max((s.node + 1 for s in services if s.clustered), default=0))  # node_network=netns
    if settings.tls:  # the server certificate names every node (and its proxies): nodes verify each other
        hosts = {h for s in services for h in (s.node_host, settings.proxy_host(s.node))}
        ensure_certificates(settings, extra_hosts=tuple(sorted(hosts)))
    errors = provision(settings, names)
    started: list[Service] = []
    failed: dict[str, str] = {name: err for name, err in errors.items() if err}
    for service in services:
        if service.name in failed or service.node_name in failed:
            continue
        if service.health().healthy:
            started.append(service)
            continue
        if process_of(service).pid() is None:  # a live but not yet healthy process is still starting
            waited = _wait_joinable(type(service)(settings, 0)) if service.node > 0 else None
            if waited:
                failed[service.node_name] = f"{service.node_name}: {waited}"
                continue
            try:
                launch = service.launch()
            except WorkbenchError as exc:
                failed[service.node_name] = f"{service.node_name}: {exc}"
                continue
            process_of(service).start(launch.command, launch.env, launch.cwd, service.namespace)
        started.append(service)
    with ThreadPoolExecutor(max_workers=max(1, len(started))) as pool:
        healths = dict(zip([s.node_name for s in started], pool.map(_wait_healthy, started), strict=True))
    statuses = []
    for service in services:
        error = failed.get(service.node_name) or failed.get(service.name)
        if error:
            statuses.append(ServiceStatus(service.node_name, service.version, service.address(), False,
                                          process_of(service).pid(), error))
            continue
        health = healths[service.node_name]
        if health.healthy:
            try:
                service.after_up()
            except WorkbenchError as exc:
                health = Health(False, health.version, str(exc))
        statuses.append(status_of(service, health))
    return statuses


def provision(settings: Settings, names: list[str] | None = None) -> dict[str, str | None]:
    """Download/build every selected service's artifacts without starting anything: name -> error."""
    services = _one_per_service(select(settings, names))
    with ThreadPoolExecutor(max_workers=len(services)) as pool:
        errors = dict(zip([s.name for s in services], pool.map(_prepare, services), strict=True))

    provision_ceilings(settings, [name for name, error in errors.items() if error is None])
    return errors


def down(settings: Settings, names: list[str] | None = None) -> list[str]:
    """Stop the selected services that this stack started, with nodes left from a larger topology; the whole
    stack's down also removes the network namespaces it made."""
    services = select(settings, names)
    services += [node for cls in SERVICES.values() if not names or cls.name in names
                 for node in (cls(settings, k) for k in range(cls.node_count(settings), MAX_NODES))
                 if process_of(node).pid_file.exists()]
    stopped = [s.node_name for s in reversed(services) if process_of(s).stop()]
    if not names:
        netns.teardown(settings)
    return stopped


def status(settings: Settings, names: list[str] | None = None) -> list[ServiceStatus]:
    services = select(settings, names)
    with ThreadPoolExecutor(max_workers=len(services)) as pool:
        return list(pool.map(status_of, services))


def logs(settings: Settings, name: str, lines: int = 50) -> str:
    service = select(settings, [name])[0]
    process = process_of(service)
    if not process.log_file.exists():
        raise WorkbenchError(f"no log for {name} yet at {process.log_file}: start it with `workbench stack up`")
    return process.tail(lines)
