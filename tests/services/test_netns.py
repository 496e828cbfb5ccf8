"""Hosts of their own (root only): namespaces, bridge and caps made by `stack up`, removed by `stack down`.

Each test has its own loopback numbers (127.0.0.2xx, so namespaces `workbench-2xx` at 10.77.1.2xx) and its
own state folder, never the main stack's. A small HTTP service defined here, with two nodes, goes through the
stack's own up/down: its nodes run inside their namespaces and answer from the host at their addresses. The
cap is checked as configuration and traffic through it; how close the rate comes to the cap is the
benchmark's job (`workbench netns caps`), which this test prints but does not assert.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from workbench.bench import netns_caps
from workbench.config import NETNS_DIR, Settings
from workbench.errors import WorkbenchError
from workbench.net import netns
from workbench.stack import manager
from workbench.stack.service import Health, Launch, Service

pytestmark = [
    pytest.mark.cluster, pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="network namespaces need root and ip"),
]
WEB_PORT = 28080
SYS_NET = Path("/sys/class/net")


def netns_settings(host: str, tmp_path: Path, **values) -> Settings:
    return Settings(host=host, node_network="netns", state_dir=tmp_path / "state", timeout_s=10.0, **values)


def ip_json(*args: str) -> list[dict]:
    return json.loads(subprocess.run(["ip", "-j", *args], capture_output=True, text=True, timeout=20,
                                     check=True).stdout or "[]")


def leftovers(settings: Settings, hosts: int) -> list[str]:
    """Whatever of this stack's network still exists."""
    found = [n.namespace for n in netns.plan(settings, hosts) if (NETNS_DIR / n.namespace).exists()]
    found += [n.veth for n in netns.plan(settings, hosts) if (SYS_NET / n.veth).exists()]
    bridge_ports = SYS_NET / netns.BRIDGE / "brif"
    if bridge_ports.is_dir() and not any(bridge_ports.iterdir()):
        found.append(f"{netns.BRIDGE} (no ports)")
    if (settings.state_dir / "netns").exists():
        found.append("records")
    return found


def test_up_twice_then_down_leaves_nothing(tmp_path):
    settings = netns_settings("127.0.0.201", tmp_path)
    try:
        assert netns.ensure(settings, 3) == ["workbench-201", "workbench-202", "workbench-203"]
        assert netns.ensure(settings, 3) == ["workbench-201", "workbench-202", "workbench-203"]  # idempotent
        assert [settings.node_host(k) for k in range(3)] == ["10.77.1.201", "10.77.1.202", "10.77.1.203"]
        bridge = ip_json("-4", "addr", "show", "dev", netns.BRIDGE)[0]
        assert [a["local"] for a in bridge["addr_info"]] == [netns.BRIDGE_ADDRESS]
        for node in netns.plan(settings, 3):
            link = ip_json("link", "show", "dev", node.veth)[0]
            assert link["master"] == netns.BRIDGE and "UP" in link["flags"]
            inside = ip_json("-n", node.namespace, "-4", "addr", "show", "dev", netns.NODE_LINK)[0]
            assert [a["local"] for a in inside["addr_info"]] == [node.address]  # one address, even after two ups
            routes = ip_json("-n", node.namespace, "route", "show")
            assert [r["dst"] for r in routes] == [str(netns.NETWORK)]  # no default route: nothing outside
            assert netns.shaping(node.namespace) == {}  # no cap asked
    finally:
        assert set(netns.teardown(settings)) <= {"workbench-201", "workbench-202", "workbench-203"}
    assert leftovers(settings, 3) == []
    assert settings.node_host(1) == "127.0.0.202"  # back on loopback


def test_a_failed_cap_leaves_nothing_after_down(tmp_path, monkeypatch):
    settings = netns_settings("127.0.0.205", tmp_path, node_bandwidth_mbps=10)
    monkeypatch.setattr(netns, "shaping_commands", lambda mbps: [["qdisc", "add", "dev", "no-such-link", "root",
                                                                  "tbf", "rate", "1mbit"]])
    with pytest.raises(WorkbenchError, match="WORKBENCH_NODE_BANDWIDTH_MBPS=10") as error:
        netns.ensure(settings, 2)
    assert "\n" not in str(error.value)
    assert leftovers(settings, 2) != []  # made and recorded before the failure
    netns.teardown(settings)
    assert leftovers(settings, 2) == []


def test_a_node_that_cannot_be_made_falls_back_to_loopback_and_removes_the_others(tmp_path, capsys):
    settings = netns_settings("127.0.0.207", tmp_path)
    blocker = netns.plan(settings, 2)[1].veth  # a link of that name that is no veth: node 1 cannot be joined
    subprocess.run(["ip", "link", "add", blocker, "type", "bridge"], check=True, timeout=20)
    try:
        assert netns.ensure(settings, 2) == []
        notice = capsys.readouterr().err.strip().splitlines()
        assert len(notice) == 1 and notice[0].startswith("notice: node_network=netns:") and "127.0.0.x" in notice[0]
        assert settings.node_host(0) == "127.0.0.207" and settings.node_host(1) == "127.0.0.208"
        assert (SYS_NET / blocker).exists()  # not ours: left alone
    finally:
        subprocess.run(["ip", "link", "del", blocker], timeout=20, check=True)
        netns.teardown(settings)
    assert leftovers(settings, 2) == []


class Web(Service):
    """A two-node HTTP service: each node serves its own name."""

    name = "web"
    version = "1"
    startup_timeout_s = 30.0

    @classmethod
    def node_count(cls, settings: Settings) -> int:
        return 2

    def provision(self) -> None:
        pass

    def launch(self) -> Launch:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "name").write_text(self.node_name)
        return Launch([sys.executable, "-m", "http.server", "--bind", self.node_host, str(WEB_PORT)],
                      cwd=self.data_dir)

    def ports(self) -> dict[str, int]:
        return {"http": WEB_PORT}

    def probe(self) -> Health:
        answer = requests.get(f"http://{self.node_host}:{WEB_PORT}/name", timeout=self.settings.timeout_s)
        return Health(answer.text == self.node_name, self.version, answer.text)


def fetch_inside(namespace: str, url: str) -> str:
    """GET `url` from inside a namespace: the answer, or the error's class name."""
    code = ("import sys, urllib.request\ntry:\n print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())\n"
            "except OSError as e:\n print(type(e).__name__, getattr(e, 'reason', ''))")
    return subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", code, url], capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_nodes_of_a_clustered_service_run_in_their_namespaces(tmp_path, monkeypatch):
    monkeypatch.setattr(manager, "SERVICES", {"web": Web})
    settings = netns_settings("127.0.0.211", tmp_path, node_bandwidth_mbps=50)
    try:
        rows = manager.up(settings)
        assert [(r.service, r.address, r.healthy) for r in rows] == [
            ("web", f"10.77.1.211:{WEB_PORT}", True), ("web-2", f"10.77.1.212:{WEB_PORT}", True)], rows
        for node in (Web(settings, 0), Web(settings, 1)):
            pid = manager.process_of(node).pid()
            assert pid is not None and node.namespace is not None
            assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(NETNS_DIR / node.namespace).st_ino
            assert requests.get(f"http://{node.node_host}:{WEB_PORT}/name", timeout=10).text == node.node_name
            assert netns.shaping(node.namespace) == {"eth0": 50_000_000, "wb-ifb": 50_000_000}
        # nodes reach each other over the bridge, and nothing outside the private range
        assert fetch_inside("workbench-211", f"http://10.77.1.212:{WEB_PORT}/name") == "web-2"
        outside = fetch_inside("workbench-211", f"http://{_host_outside()}:{WEB_PORT}/")
        assert outside.startswith("URLError") and "unreachable" in outside
        assert manager.up(settings) and len(netns.namespaces(settings)) == 2  # a second up changes nothing
    finally:
        stopped = manager.down(settings)
    assert stopped == ["web-2", "web"]
    assert leftovers(settings, 2) == []
    assert manager.process_of(Web(settings, 0)).pid() is None


def _host_outside() -> str:
    """An address of this machine outside the namespaces' range (its first non-loopback IPv4 address)."""
    rows = ip_json("-4", "addr", "show")
    return next(a["local"] for r in rows for a in r["addr_info"]
                if not a["local"].startswith("127.") and not a["local"].startswith("10.77."))


def test_the_cap_is_configured_and_traffic_goes_through_it(tmp_path):
    cap = 40
    settings = netns_settings("127.0.0.215", tmp_path, node_bandwidth_mbps=cap)
    try:
        node = netns.node_of(netns.ensure(settings, 1)[0])
        assert netns.shaping(node.namespace) == {"eth0": cap * 1_000_000, "wb-ifb": cap * 1_000_000}
        sent = netns_caps._node_sends(node, 2.0, settings.timeout_s)
        received = netns_caps._node_receives(node, 2.0, settings.timeout_s)
        print(f"\ncap {cap} Mbit/s: node sends {sent / 1e6:.1f} ({sent / 1e6 / cap:.3f}), "
              f"receives {received / 1e6:.1f} ({received / 1e6 / cap:.3f})")
        stats = json.loads(subprocess.run(["tc", "-n", node.namespace, "-s", "-j", "qdisc", "show"],
                                          capture_output=True, text=True, timeout=20, check=True).stdout)
        shaped = {row["dev"]: row["bytes"] for row in stats if row["kind"] == "tbf"}
        assert sent > 0 and received > 0
        assert shaped["eth0"] > 1_000_000 and shaped["wb-ifb"] > 1_000_000  # both transfers passed the shapers
    finally:
        netns.teardown(settings)
    assert leftovers(settings, 1) == []


def test_the_command_line_shows_the_caps_and_measures_them(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from workbench import cli_netns

    settings = netns_settings("127.0.0.218", tmp_path, node_bandwidth_mbps=30)
    monkeypatch.setattr(cli_netns, "get_settings", lambda: settings)
    try:
        netns.ensure(settings, 1)
        shown = CliRunner().invoke(cli_netns.app, ["show"], terminal_width=200)
        assert shown.exit_code == 0, shown.output
        assert "workbench-218" in shown.output and "10.77.1.218" in shown.output and "30" in shown.output
        measured = CliRunner().invoke(cli_netns.app, ["caps", "--mbps", "30", "--repeats", "1", "--seconds", "1.5",
                                                      "--host", "127.0.0.219"], terminal_width=200)
        assert measured.exit_code == 0, measured.output
        print("\n" + measured.output)
        assert "send" in measured.output and "receive" in measured.output and "median ratio" in measured.output
    finally:
        netns.teardown(settings)
    assert leftovers(settings, 1) == [] and not (NETNS_DIR / "workbench-219").exists()


@pytest.mark.services
def test_a_minio_cluster_runs_in_namespaces_behind_host_side_proxies(tmp_path):
    """2 MinIO processes x 2 drives, each in its namespace capped at 100 Mbit/s; toxiproxy on the host."""
    from workbench.stack.minio import MinIO
    from workbench.storage import s3_client

    cap = 100
    settings = netns_settings("127.0.0.221", tmp_path, node_bandwidth_mbps=cap, s3_nodes=2, s3_drives_per_node=2,
                              s3_port=29500, s3_console_port=29501, proxy_s3_port=29590, toxiproxy_port=29574,
                              tls=False)
    services = ["toxiproxy", "minio"]
    try:
        rows = manager.up(settings, services)
        assert all(r.healthy for r in rows), [f"{r.service}: {r.detail}" for r in rows if not r.healthy]
        assert [r.address for r in rows] == ["127.0.0.221:29574", "10.77.1.221:29500", "10.77.1.222:29500"]
        listening = {p["listen"]: p["upstream"] for p in requests.get(
            "http://127.0.0.221:29574/proxies", timeout=10).json().values() if p["listen"].endswith(":29590")}
        assert listening == {"127.0.0.221:29590": "10.77.1.221:29500", "127.0.0.222:29590": "10.77.1.222:29500"}
        direct = s3_client(settings, endpoint=MinIO(settings, 1).url())  # node 1, in its namespace
        # Under load the first request can time out after it succeeded; botocore's retry then finds the bucket.
        with contextlib.suppress(direct.exceptions.BucketAlreadyOwnedByYou):
            direct.create_bucket(Bucket="netns")
        payload = os.urandom(12 * 2**20)
        direct.put_object(Bucket="netns", Key="blob", Body=payload)
        proxied = s3_client(settings, via_proxy=True)  # node 0 through its proxy on the host side
        start = time.monotonic()
        assert proxied.get_object(Bucket="netns", Key="blob")["Body"].read() == payload
        seconds = time.monotonic() - start
        print(f"\n12 MiB through node 0's proxy at a {cap} Mbit/s cap: {len(payload) * 8 / seconds / 1e6:.1f} Mbit/s "
              f"({len(payload) * 8 / seconds / 1e6 / cap:.2f} of the cap; the object's shards also cross node 1's)")
    finally:
        manager.down(settings, services)
        manager.down(settings)
    assert leftovers(settings, 2) == []
