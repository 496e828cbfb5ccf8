"""toxiproxy, built from source through the Go module proxy: the stack's network emulator."""

from __future__ import annotations

from workbench.net.toxiproxy import Toxiproxy as ToxiproxyAPI
from workbench.stack.provision import go_install
from workbench.stack.service import Health, Launch, Service


class Toxiproxy(Service):
    name = "toxiproxy"
    version = "2.12.0"
    startup_timeout_s = 30.0

    def provision(self) -> None:
        go_install(self.name, self.home, f"github.com/Shopify/toxiproxy/v2/cmd/server@v{self.version}",
                   "toxiproxy-server", ldflags=f"-X github.com/Shopify/toxiproxy/v2.Version={self.version}")

    def launch(self) -> Launch:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [str(self.home / "toxiproxy-server"), "-host", self.settings.host,
                   "-port", str(self.settings.toxiproxy_port)]
        return Launch(command, cwd=self.data_dir)

    def ports(self) -> dict[str, int]:
        return {"api": self.settings.toxiproxy_port}

    def probe(self) -> Health:
        return Health(True, version=ToxiproxyAPI(self.settings).version())

    def after_up(self) -> None:
        ToxiproxyAPI(self.settings).ensure_proxies()
