"""Bring the local stack up and down: provision, start, wait for health, report.

`up` is idempotent (a healthy service is left alone), one failing service never stops the others,
and `down` stops exactly the processes recorded in pid files.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.stack.ceilings import provision_ceilings  # the native ceilings of the provisioned services
from workbench.stack.process import ManagedProcess
from workbench.stack.registry import SERVICES
from workbench.stack.service import Health, Service
from workbench.stack.tls import ensure_certificates  # cryptography is needed only with TLS


@dataclass
class ServiceStatus:
    service: str
    version: str
    address: str
    healthy: bool
    pid: int | None
    detail: str = ""


def select(settings: Settings, names: list[str] | None = None) -> list[Service]:
    unknown = sorted(set(names or []) - set(SERVICES))
    if unknown:
        raise WorkbenchError(f"unknown service(s) {', '.join(unknown)}: choose from {', '.join(SERVICES)}")
    return [cls(settings) for name, cls in SERVICES.items() if not names or name in names]


def process_of(service: Service) -> ManagedProcess:
    return ManagedProcess(service.name, service.settings.state_dir / "run")


def status_of(service: Service, health: Health | None = None) -> ServiceStatus:
    health = health or service.health()
    return ServiceStatus(service.name, health.version or service.version, service.address(), health.healthy,
                         process_of(service).pid(), health.detail)


def _prepare(service: Service) -> str | None:
    """Provision (toolchains are needed only to download or build); the error, or None when ready."""
    try:
        service.provision()
    except WorkbenchError as exc:
        return f"{service.name}: {exc}"
    return None


def _wait_healthy(service: Service) -> Health:
    process = process_of(service)
    deadline = time.monotonic() + service.startup_timeout_s
    health = service.health()
    while not health.healthy and time.monotonic() < deadline:
        if process.pid() is None:
            last = process.tail(3).replace("\n", " | ")
            return Health(False, detail=f"exited during start-up; log {process.log_file}: {last[-300:]}")
        time.sleep(1.0)
        health = service.health()
    if not health.healthy:
        health.detail = f"not healthy after {service.startup_timeout_s:.0f}s ({health.detail}); see {process.log_file}"
    return health


def up(settings: Settings, names: list[str] | None = None) -> list[ServiceStatus]:
    """Provision and start the selected services, wait until healthy, and return their status."""
    if settings.stack != "local":
        raise WorkbenchError(f"stack mode is '{settings.stack}': the CLI only manages services with --stack local")
    settings.check_credentials()
    services = select(settings, names)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    if settings.tls:
        ensure_certificates(settings)
    errors = provision(settings, names)
    started: list[Service] = []
    failed: dict[str, str] = {name: err for name, err in errors.items() if err}
    for service in services:
        if service.name in failed:
            continue
        if service.health().healthy:
            started.append(service)
            continue
        if process_of(service).pid() is None:  # a live but not yet healthy process is still starting
            try:
                launch = service.launch()
            except WorkbenchError as exc:
                failed[service.name] = f"{service.name}: {exc}"
                continue
            process_of(service).start(launch.command, launch.env, launch.cwd)
        started.append(service)
    with ThreadPoolExecutor(max_workers=max(1, len(started))) as pool:
        healths = dict(zip([s.name for s in started], pool.map(_wait_healthy, started), strict=True))
    statuses = []
    for service in services:
        if service.name in failed:
            statuses.append(ServiceStatus(service.name, service.version, service.address(), False,
                                          process_of(service).pid(), failed[service.name]))
            continue
        health = healths[service.name]
        if health.healthy:
            try:
                service.after_up()
            except WorkbenchError as exc:
                health = Health(False, health.version, str(exc))
        statuses.append(status_of(service, health))
    return statuses


def provision(settings: Settings, names: list[str] | None = None) -> dict[str, str | None]:
    """Download/build every selected service's artifacts without starting anything: name -> error."""
    services = select(settings, names)
    with ThreadPoolExecutor(max_workers=len(services)) as pool:
        errors = dict(zip([s.name for s in services], pool.map(_prepare, services), strict=True))

    provision_ceilings(settings, [name for name, error in errors.items() if error is None])
    return errors


def down(settings: Settings, names: list[str] | None = None) -> list[str]:
    """Stop the selected services that this stack started; returns the names stopped."""
    return [s.name for s in reversed(select(settings, names)) if process_of(s).stop()]


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
