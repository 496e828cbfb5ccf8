"""Control toxiproxy, the workbench's network emulator: latency, jitter, bandwidth and faults per path.

The kernel here has no netem qdisc, so every emulated network condition is a toxiproxy "toxic" on the
proxy that sits between a client and a service (see `workbench.config.PROXIED`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests

from workbench.config import PROXIED, Settings
from workbench.errors import WorkbenchError


def _half(ms: float) -> int:
    return round(ms) // 2


def _rest(ms: float) -> int:
    return round(ms) - _half(ms)


class Toxiproxy:
    """A thin client of toxiproxy's HTTP API; every call has a timeout."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.base = f"http://{settings.host}:{settings.toxiproxy_port}"

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        try:
            response = requests.request(method, self.base + path, json=json, timeout=self.settings.timeout_s)
        except requests.RequestException as exc:
            raise WorkbenchError(f"cannot reach toxiproxy at {self.base}: {exc}; is the stack up?") from exc
        if response.status_code >= 400:
            raise WorkbenchError(f"toxiproxy {method} {path} failed ({response.status_code}): {response.text.strip()}")
        return response.json() if response.content else None

    def version(self) -> str:
        response = requests.get(self.base + "/version", timeout=self.settings.timeout_s)
        response.raise_for_status()
        text = response.text.strip()
        return text if not text.startswith("{") else response.json().get("version", text)

    def proxies(self) -> dict[str, dict]:
        return self._call("GET", "/proxies")

    def ensure_proxies(self) -> None:
        """One proxy per service path and node, listening on the node's loopback address at the path's proxy port
        and forwarding to that node's server (see Settings.proxy_names; with node_network=netns the server is in
        the node's namespace, the proxy on the host side)."""
        s = self.settings
        wanted = [
            {"name": name, "listen": f"{s.proxy_host(node)}:{s.port(path, via_proxy=True)}",
             "upstream": f"{s.node_host(node)}:{s.port(path)}", "enabled": True}
            for path in PROXIED for node, name in enumerate(s.proxy_names(path))
        ]
        self._call("POST", "/populate", wanted)

    def reset(self) -> None:
        """Remove every toxic and re-enable every proxy: a clean network."""
        self._call("POST", "/reset")

    def add_toxic(self, proxy: str, kind: str, attributes: dict[str, float], stream: str = "downstream",
                  name: str | None = None, toxicity: float = 1.0) -> str:
        name = name or f"{kind}_{stream}"
        self._call("POST", f"/proxies/{proxy}/toxics", {
            "name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attributes,
        })
        return name

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def node_proxies(self, node: int) -> list[str]:
        """Node `node`'s proxies, one per path it serves (`cassandra-2`, `s3-2`, ...): its links to the clients."""
        s = self.settings
        return [s.proxy_names(path)[node] for path in PROXIED if node < s.nodes_of(path)]

    def set_network(self, proxy: str, rtt_ms: float = 0, jitter_ms: float = 0, bandwidth_kbps: float = 0) -> None:
        """Replace the proxy's toxics by a round-trip time (half each way), jitter and a bandwidth cap."""
        for toxic in self._call("GET", f"/proxies/{proxy}/toxics"):
            self.remove_toxic(proxy, toxic["name"])
        if rtt_ms > 0 or jitter_ms > 0:
            # toxiproxy takes whole milliseconds per direction; the two halves add up to the asked RTT.
            for stream, share in (("upstream", _half), ("downstream", _rest)):
                self.add_toxic(proxy, "latency", {"latency": share(rtt_ms), "jitter": share(jitter_ms)}, stream)
        if bandwidth_kbps > 0:
            # toxiproxy's bandwidth toxic is in KB/s; callers think in kbit/s like network people do.
            for stream in ("upstream", "downstream"):
                self.add_toxic(proxy, "bandwidth", {"rate": max(1, int(bandwidth_kbps / 8))}, stream)

    def check_network(self, proxy: str, rtt_ms: float = 0, jitter_ms: float = 0, bandwidth_kbps: float = 0) -> None:
        """Raise if the proxy no longer has the toxics `set_network` gave it (someone reset toxiproxy)."""
        expected = 2 * ((rtt_ms > 0 or jitter_ms > 0) + (bandwidth_kbps > 0))
        found = len(self._call("GET", f"/proxies/{proxy}/toxics"))
        if found != expected:
            raise WorkbenchError(f"network conditions on '{proxy}' changed during the measurement ({found} toxics, "
                                 f"expected {expected}): another process is using toxiproxy; measure again alone")

    @contextmanager
    def network(self, proxy: str, rtt_ms: float = 0, jitter_ms: float = 0,
                bandwidth_kbps: float = 0) -> Iterator[None]:
        """Apply a network condition for the duration of a block, then restore a clean path."""
        self.set_network(proxy, rtt_ms, jitter_ms, bandwidth_kbps)
        try:
            yield
        finally:
            self.set_network(proxy)
