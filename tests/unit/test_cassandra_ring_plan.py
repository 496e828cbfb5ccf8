"""A Cassandra ring's configuration, checks before start-up and client routing, without servers.

The ring itself (start-up, token-aware reads through the proxies, a node killed mid-epoch) is
tests/services/test_cassandra_ring.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.clients.cassandra import (
    cassandra_cluster,
    cassandra_session,
    driver_options,
    native_topology,
    translated_addresses,
)
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.stack import cassandra as module
from workbench.stack import topology_check
from workbench.stack.cassandra import Cassandra, ring_tokens

FREE_HOST = "127.0.0.201"  # nothing listens there: launches and connects below fail or pass on their own
PORTS = {"cassandra_port": 29842, "cassandra_storage_port": 29800, "cassandra_jmx_port": 29899,
         "proxy_cassandra_port": 29843}


def ring(tmp_path: Path, nodes: int = 3, **update) -> Settings:
    return Settings(_env_file=None, host=FREE_HOST, state_dir=tmp_path / "state", cache_dir=tmp_path / "cache",
                    cassandra_nodes=nodes, cassandra_replication_factor=min(3, nodes), cassandra_username="workbench",
                    cassandra_password="pw" * 12, **{**PORTS, **update})


# ----------------------------------------------------------------------------------- the ring's yaml


def test_tokens_split_the_murmur3_range_evenly():
    tokens = ring_tokens(3)
    assert tokens[0] == -(2**63)
    owned = [b - a for a, b in zip(tokens, [*tokens[1:], tokens[0] + 2**64], strict=True)]  # the last wraps
    assert tokens == sorted(tokens) and sum(owned) == 2**64
    assert max(owned) - min(owned) <= 2  # within rounding of 2^64 / 3
    assert ring_tokens(1) == [-(2**63)]


def test_each_node_listens_on_its_own_address_with_its_token_and_node_0_as_the_only_seed(tmp_path):
    settings = ring(tmp_path)
    yamls = [Cassandra(settings, k).yaml() for k in range(3)]
    for k, text in enumerate(yamls):
        assert f"listen_address: 127.0.0.{201 + k}" in text and f"rpc_address: 127.0.0.{201 + k}" in text
        assert 'seeds: "127.0.0.201:29800"' in text
        assert f"initial_token: {ring_tokens(3)[k]}" in text and "auto_bootstrap: false" in text
        assert "broadcast_rpc_address" not in text  # loopback nodes: clients reach each node where it listens
    assert len({Cassandra(settings, k).data_dir for k in range(3)}) == 3


def test_a_single_node_keeps_its_yaml_without_tokens(tmp_path):
    text = Cassandra(ring(tmp_path, nodes=1)).yaml()
    assert "initial_token" not in text and "auto_bootstrap" not in text
    assert 'seeds: "127.0.0.201:29800"' in text


def _fake_jars(settings: Settings) -> None:
    lib = settings.cache_dir / f"cassandra-{Cassandra.version}" / "lib"
    lib.mkdir(parents=True)
    (lib / "jamm-0.4.0.jar").touch()


def test_ring_nodes_get_their_own_jmx_port_and_a_heap_of_at_most_1_gib(tmp_path, monkeypatch):
    settings = ring(tmp_path)
    _fake_jars(settings)
    seen: dict[str, object] = {}
    monkeypatch.setattr(module, "java_command", lambda cp, main, heap, props, extra: seen.update(heap=heap) or
                        [f"-D{k}={v}" for k, v in props.items()])
    command = Cassandra(settings, 0).launch().command
    assert "-Dcassandra.jmx.local.port=29899" in command and seen["heap"] == "768M"
    assert [Cassandra(settings, k).jmx_port for k in range(3)] == [29899, 29900, 29901]
    assert Cassandra(ring(tmp_path, nodes=1)).heap_mib == 1024


def test_node_0_records_the_size_the_ring_is_born_with(tmp_path, monkeypatch):
    settings = ring(tmp_path)
    _fake_jars(settings)
    monkeypatch.setattr(module, "java_command", lambda cp, main, heap, props, extra: [])
    Cassandra(settings, 0).launch()
    assert json.loads((settings.state_dir / "cassandra" / "ring.json").read_text()) == {"nodes": 3}


def test_a_node_does_not_start_before_its_seed(tmp_path):
    settings = ring(tmp_path)
    (settings.state_dir / "cassandra").mkdir(parents=True)
    (settings.state_dir / "cassandra" / "ring.json").write_text('{"nodes": 3}')
    with pytest.raises(WorkbenchError, match=r"the seed node cassandra at 127\.0\.0\.201:29800 is not running: "
                                             r"cassandra-2 joins the ring through it"):
        Cassandra(settings, 1).launch()


def test_a_ring_does_not_grow_over_data_it_would_hide(tmp_path):
    """Node 0 started alone (its data has no record of a ring): a new node would take ranges without their data."""
    settings = ring(tmp_path)
    (settings.state_dir / "cassandra" / "data" / "system").mkdir(parents=True)
    with pytest.raises(WorkbenchError) as error:
        Cassandra(settings, 1).launch()
    message = str(error.value)
    assert "cassandra-2 would join a ring that started with 1 node(s)" in message
    assert "WORKBENCH_CASSANDRA_NODES=1" in message and "\n" not in message


def test_a_ring_node_refuses_an_address_another_server_holds(tmp_path):
    with socket.socket() as taken:
        taken.bind((FREE_HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(WorkbenchError, match=rf"127\.0\.0\.201:{port} already in use by a process this stack "
                                                 "did not start, so Cassandra node cassandra cannot start there"):
            Cassandra(ring(tmp_path, cassandra_port=port), 0).launch()


# ------------------------------------------------------------------------------------------- memory


def test_a_ring_that_does_not_fit_in_memory_says_what_it_needs_and_what_is_free(tmp_path, monkeypatch):
    monkeypatch.setattr(topology_check, "mem_available_mib", lambda: 2000)
    with pytest.raises(WorkbenchError) as error:
        Cassandra(ring(tmp_path), 0).launch()
    message = str(error.value)
    assert "\n" not in message
    need = 3 * (module.RING_HEAP_MIB + module.JVM_OVERHEAD_MIB)
    assert f"needs {need:,} MiB" in message and "only 2,000 MiB are available" in message
    assert "WORKBENCH_CASSANDRA_NODES" in message
    assert not (tmp_path / "state" / "cassandra" / "conf").exists()  # refused before anything was written


def test_mem_available_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20480000 kB\n")
    assert topology_check.mem_available_mib(meminfo) == 20000
    assert topology_check.mem_available_mib(tmp_path / "missing") is None
    topology_check.check_memory([("x", 2, 10_000)], "hint", available_mib=20_000)  # fits exactly


# ----------------------------------------------------------------------------------- bad input: CLI


def test_a_replication_factor_above_the_node_count_is_refused_by_the_cli_before_anything_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    env.update(WORKBENCH_HOST=FREE_HOST, WORKBENCH_STATE_DIR=str(tmp_path / "state"), WORKBENCH_CASSANDRA_NODES="1",
               WORKBENCH_CASSANDRA_REPLICATION_FACTOR="3")
    workbench = Path(sys.executable).with_name("workbench")
    done = subprocess.run([str(workbench), "stack", "up", "cassandra"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert "WORKBENCH_CASSANDRA_REPLICATION_FACTOR=3 is larger than WORKBENCH_CASSANDRA_NODES=1" in lines[0]
    assert not (tmp_path / "state").exists()


# ------------------------------------------------------------------------------------------ clients


def test_a_ring_client_routes_by_token_at_the_configured_consistency(tmp_path):
    from cassandra import ConsistencyLevel
    from cassandra.cluster import EXEC_PROFILE_DEFAULT
    from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy

    settings = ring(tmp_path, cassandra_consistency="QUORUM")
    profile = driver_options(settings, settings.cassandra_port)["execution_profiles"][EXEC_PROFILE_DEFAULT]
    assert isinstance(profile.load_balancing_policy, TokenAwarePolicy)
    assert profile.consistency_level == ConsistencyLevel.QUORUM
    single = driver_options(ring(tmp_path, nodes=1), 29842)["execution_profiles"][EXEC_PROFILE_DEFAULT]
    assert type(single.load_balancing_policy) is RoundRobinPolicy and single.consistency_level == ConsistencyLevel.ONE
    assert native_topology(settings) == {"consistency": "QUORUM", "token_aware_routing": True}
    assert native_topology(ring(tmp_path, nodes=1))["token_aware_routing"] is False


def test_peers_found_through_a_proxy_are_reached_at_the_proxy_port_not_the_advertised_one(tmp_path):
    settings = ring(tmp_path)
    peer = {"peer": "127.0.0.202", "rpc_address": "127.0.0.202", "native_address": "127.0.0.202",
            "native_port": 29842, "host_id": "x", "data_center": "dc", "rack": "r", "tokens": ["1"]}
    proxied = cassandra_cluster(settings, via_proxy=True)
    assert [(p[0], p[1]) for p in proxied.contact_points] == [(f"127.0.0.{201 + k}", 29843) for k in range(3)]
    endpoint = proxied.endpoint_factory.create(peer)
    assert (endpoint.address, endpoint.port) == ("127.0.0.202", 29843)
    direct = cassandra_cluster(settings).endpoint_factory.create(peer)
    assert (direct.address, direct.port) == ("127.0.0.202", 29842)


def test_clients_around_the_proxies_map_a_namespace_nodes_advertised_address_back():
    translator = translated_addresses({"127.0.0.12": "10.77.1.12"})
    assert translator.translate("127.0.0.12") == "10.77.1.12" and translator.translate("127.0.0.13") == "127.0.0.13"


def test_an_unreachable_ring_names_every_node_it_tried(tmp_path):
    settings = ring(tmp_path, timeout_s=2.0)
    with pytest.raises(WorkbenchError) as error, cassandra_session(settings):
        pass
    message = str(error.value)
    assert "cannot reach Cassandra at 127.0.0.201:29842, 127.0.0.202:29842, 127.0.0.203:29842" in message
    with pytest.raises(WorkbenchError, match=r"cannot reach Cassandra at 127\.0\.0\.202:29842[:;]"), \
            cassandra_session(settings, node=1):
        pass
