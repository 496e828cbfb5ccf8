"""What every service of the local stack provides: provisioning, a start command and a health probe.

Adding a service is one module with a `Service` subclass plus one line in `workbench.stack.registry`.
A clustered service runs one instance per node (`node_count`): node k is named `<name>-<k+1>` (node 0 keeps
the plain name), listens on `settings.node_host(k)` with the service's usual ports, and keeps its own data
folder, pid file and log. With node_network=netns each node of a clustered service runs in its node's network
namespace (`workbench.net.netns`), started through `ip netns exec`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from workbench.config import Settings
from workbench.errors import first_line


@dataclass
class Health:
    healthy: bool
    version: str = ""
    detail: str = ""


@dataclass
class Launch:
    """How to start a server process."""

    command: list[str]
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: Path = Path(".")


class Service(ABC):
    name: ClassVar[str]
    version: ClassVar[str]
    startup_timeout_s: ClassVar[float] = 120.0

    def __init__(self, settings: Settings, node: int = 0) -> None:
        self.settings = settings
        self.node = node

    @classmethod
    def node_count(cls, settings: Settings) -> int:
        """How many nodes of this service the topology asks for (clustered services override it)."""
        return 1

    @property
    def node_name(self) -> str:
        """This node's name: the service's for node 0, `<name>-<k+1>` for the others."""
        return self.name if self.node == 0 else f"{self.name}-{self.node + 1}"

    @property
    def clustered(self) -> bool:
        """Whether this service runs one instance per node (it overrides `node_count`): those listen on node
        addresses and, with node_network=netns, run in their node's namespace; the others stay on the host."""
        return type(self).node_count.__func__ is not Service.node_count.__func__  # type: ignore[attr-defined]

    @property
    def node_host(self) -> str:
        """The address this node listens on."""
        return self.settings.node_host(self.node) if self.clustered else self.settings.proxy_host(self.node)

    @property
    def namespace(self) -> str | None:
        """The network namespace this node runs in (node_network=netns, once `stack up` made it), else None."""
        return self.settings.node_namespace(self.node) if self.clustered else None

    @property
    def home(self) -> Path:
        """Cache folder for this version's artifacts (outside the repo, kept between runs)."""
        return self.settings.cache_dir / f"{self.name}-{self.version}"

    @property
    def data_dir(self) -> Path:
        return self.settings.state_dir / self.node_name

    @abstractmethod
    def provision(self) -> None:
        """Download or build what the server needs; a no-op when the cache is complete."""

    @abstractmethod
    def launch(self) -> Launch:
        """Write configuration into the state folder and say how to start the server."""

    @abstractmethod
    def ports(self) -> dict[str, int]:
        """Named ports the server listens on (the first is its main address)."""

    @abstractmethod
    def probe(self) -> Health:
        """A real request against the server, with timeouts; raises or returns unhealthy when it fails."""

    def joinable(self) -> bool:
        """Node 0's say whether the other nodes may start now. True unless a node that joins too early breaks the
        cluster (Ignite with a login); `up` waits on it before it launches node 1 and on."""
        return True

    def after_up(self) -> None:  # noqa: B027 - an optional hook, not an abstract step
        """Hook run once the server is healthy (e.g. create toxiproxy proxies)."""

    def address(self) -> str:
        return f"{self.node_host}:{next(iter(self.ports().values()))}"

    def health(self) -> Health:
        try:
            return self.probe()
        except Exception as exc:  # a probe failure of any kind means "not healthy", with the reason
            return Health(False, detail=first_line(exc, 160))
