"""What every service of the local stack provides: provisioning, a start command and a health probe.

Adding a service is one module with a `Service` subclass plus one line in `workbench.stack.registry`.
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

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def home(self) -> Path:
        """Cache folder for this version's artifacts (outside the repo, kept between runs)."""
        return self.settings.cache_dir / f"{self.name}-{self.version}"

    @property
    def data_dir(self) -> Path:
        return self.settings.state_dir / self.name

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

    def after_up(self) -> None:  # noqa: B027 - an optional hook, not an abstract step
        """Hook run once the server is healthy (e.g. create toxiproxy proxies)."""

    def address(self) -> str:
        return f"{self.settings.host}:{next(iter(self.ports().values()))}"

    def health(self) -> Health:
        try:
            return self.probe()
        except Exception as exc:  # a probe failure of any kind means "not healthy", with the reason
            return Health(False, detail=first_line(exc, 160))
