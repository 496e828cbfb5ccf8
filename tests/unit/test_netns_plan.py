"""node_network=netns without root: the address plan, the fall-back, the tc commands, which services move.

The namespaces themselves (root only) are made in tests/services/test_netns.py; here a folder stands in for
/run/netns, so `Settings.node_host` sees which namespaces "exist".
"""

from __future__ import annotations

import pytest

from workbench import config
from workbench.clients.endpoints import cassandra_points, ignite_points
from workbench.config import Settings
from workbench.net import netns
from workbench.stack.cassandra import Cassandra
from workbench.stack.ignite import Ignite
from workbench.stack.minio import MinIO
from workbench.stack.toxiproxy import Toxiproxy
from workbench.stack.triton import Triton


@pytest.fixture
def run_netns(tmp_path, monkeypatch):
    """A stand-in for /run/netns: a namespace 'exists' when its file does."""
    folder = tmp_path / "netns"
    folder.mkdir()
    monkeypatch.setattr(config, "NETNS_DIR", folder)
    return folder


def netns_settings(**values) -> Settings:
    return Settings(host="127.0.0.21", node_network="netns", cassandra_nodes=3, s3_nodes=3, **values)


def test_loopback_nodes_are_unchanged_even_beside_namespaces(run_netns):
    (run_netns / "workbench-22").touch()
    settings = Settings(host="127.0.0.21", cassandra_nodes=3)
    assert [settings.node_host(k) for k in range(3)] == ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
    assert [settings.proxy_host(k) for k in range(3)] == ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
    assert settings.node_namespace(1) is None
    assert settings.s3_endpoint() == "http://127.0.0.21:9000"


def test_a_node_whose_namespace_exists_is_at_its_namespace_address(run_netns):
    settings = netns_settings()
    assert settings.node_host(1) == "127.0.0.22"  # no namespace yet: loopback
    for k in range(3):
        (run_netns / settings.netns_name(k)).touch()
    assert [settings.node_namespace(k) for k in range(3)] == ["workbench-21", "workbench-22", "workbench-23"]
    assert [settings.node_host(k) for k in range(3)] == ["10.77.1.21", "10.77.1.22", "10.77.1.23"]
    assert [settings.proxy_host(k) for k in range(3)] == ["127.0.0.21", "127.0.0.22", "127.0.0.23"]
    assert settings.s3_endpoint() == "http://10.77.1.21:9000"
    assert settings.s3_endpoint(via_proxy=True) == "http://127.0.0.21:19000"
    # clients reach the servers in the namespaces directly, and their proxies on the host side
    assert cassandra_points(settings)[1] == ("10.77.1.22", 9042)
    assert cassandra_points(settings, via_proxy=True)[1] == ("127.0.0.22", 19042)
    assert ignite_points(settings, via_proxy=True) == [("127.0.0.21", 20800)]


def test_the_plan_names_fit_linux_interface_names():
    nodes = netns.plan(Settings(host="127.0.0.240", node_network="netns"), 16)
    assert nodes[0] == netns.Node("workbench-240", "10.77.1.240", "wb-veth240")
    assert nodes[-1].address == "10.77.1.255"
    assert all(len(n.veth) <= 15 for n in nodes)
    assert netns.node_of("workbench-7").veth == "wb-veth7"


def test_shaping_caps_both_directions_with_one_rate():
    commands = netns.shaping_commands(10)
    tbfs = [c for c in commands if "tbf" in c]
    assert [c[c.index("dev") + 1] for c in tbfs] == ["eth0", "wb-ifb"]
    assert all(c[c.index("rate") + 1] == "10000000bit" for c in tbfs)
    assert all(int(c[c.index("burst") + 1]) == netns.MIN_BURST_BYTES for c in tbfs)  # a whole GSO packet
    redirect = next(c for c in commands if c[0] == "filter")
    assert redirect[-3:] == ["redirect", "dev", "wb-ifb"] and "ffff:" in redirect
    fast = netns.shaping_commands(10_000)[0]
    assert int(fast[fast.index("burst") + 1]) == 10_000 * 1_000_000 // 8 // 100  # 10 ms of the rate


def test_without_root_the_stack_falls_back_to_loopback_with_one_notice(run_netns, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    settings = netns_settings(state_dir=tmp_path / "state")
    assert netns.ensure(settings, 3) == []
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "not root" in lines[0] and "127.0.0.x" in lines[0]
    assert settings.node_host(2) == "127.0.0.23"
    assert not (tmp_path / "state").exists()
    assert netns.teardown(settings) == []


def test_loopback_settings_make_nothing(capsys, tmp_path):
    assert netns.ensure(Settings(host="127.0.0.21", state_dir=tmp_path), 3) == []
    assert capsys.readouterr().err == ""


def test_a_non_loopback_host_cannot_name_namespaces(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    reason = netns.unavailable_reason(Settings(host="10.0.0.5", node_network="netns"))
    assert reason is not None and "WORKBENCH_HOST=10.0.0.5" in reason


def test_only_clustered_services_move_into_namespaces(run_netns):
    settings = netns_settings(ignite_nodes=3)
    for k in range(3):
        (run_netns / settings.netns_name(k)).touch()
    assert all(cls(settings, 1).clustered for cls in (Cassandra, MinIO, Ignite))
    assert not any(cls(settings).clustered for cls in (Toxiproxy, Triton))
    assert Cassandra(settings, 2).namespace == "workbench-23" and Cassandra(settings, 2).node_host == "10.77.1.23"
    assert Toxiproxy(settings).namespace is None and Toxiproxy(settings).node_host == "127.0.0.21"
    assert Triton(settings).address().startswith("127.0.0.21:")


def test_the_exec_prefix_enters_the_namespace_only_when_there_is_one():
    assert netns.exec_prefix("workbench-3") == ["ip", "netns", "exec", "workbench-3"]
    assert netns.exec_prefix(None) == []


def test_show_without_namespaces_says_the_nodes_are_on_loopback(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from workbench import cli_netns

    monkeypatch.setattr(cli_netns, "get_settings", lambda: Settings(state_dir=tmp_path))
    result = CliRunner().invoke(cli_netns.app, ["show"])
    assert result.exit_code == 0 and "no namespaces" in result.output
