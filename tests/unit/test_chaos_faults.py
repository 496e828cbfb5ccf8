"""The chaos soak's node faults without servers: which nodes a fault may strike, which faults apply to a loader,
how a node's links to the clients are named, and how the soak reports a node fault.

The faults themselves strike real clusters in tests/services (test_cassandra_ring.py, test_ignite_cluster.py,
test_chaos_netns.py).
"""

from __future__ import annotations

import pytest

from workbench import config
from workbench.chaos import (
    FAULTS,
    ChaosReport,
    FaultRecord,
    applicable_faults,
    epoch_line,
    fault_names,
    format_report,
    node_targets,
    run_chaos,
)
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.net.toxiproxy import Toxiproxy
from workbench.stack.manager import nodes_behind


def cluster(**values) -> Settings:
    return Settings(_env_file=None, host="127.0.0.41", cassandra_nodes=3, cassandra_replication_factor=3,
                    s3_nodes=2, ignite_nodes=2, ignite_backups=1, **values)


def test_the_nodes_behind_a_path_are_found_by_address_node_k_behind_proxy_k():
    settings = cluster(s3_port=29500)
    assert [n.node_name for n in nodes_behind(settings, "cassandra")] == ["cassandra", "cassandra-2", "cassandra-3"]
    assert [n.node_name for n in nodes_behind(settings, "s3")] == ["minio", "minio-2"]  # any port of the path
    assert [n.node_name for n in nodes_behind(settings, "ignite")] == ["ignite", "ignite-2"]
    assert [n.node_name for n in nodes_behind(settings, "triton_http")] == ["triton"]
    assert [n.address() for n in nodes_behind(settings, "s3")] == ["127.0.0.41:29500", "127.0.0.42:29500"]


def test_node_faults_strike_every_node_but_node_0_and_only_a_local_cluster():
    settings = cluster()
    assert node_targets(settings, "cassandra") == ["cassandra-2", "cassandra-3"]
    assert node_targets(settings, "cassandra-py") == ["cassandra-2", "cassandra-3"]
    assert node_targets(settings, "s3-shards") == ["minio-2"]
    assert node_targets(settings, "ignite") == ["ignite-2"]
    assert node_targets(Settings(_env_file=None), "cassandra") == []  # one node: nothing to strike
    external = Settings(_env_file=None, stack="external", cassandra_nodes=3, cassandra_replication_factor=3)
    assert node_targets(external, "cassandra") == []  # not our processes


def test_in_netns_mode_the_nodes_are_found_at_their_namespace_addresses(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "NETNS_DIR", tmp_path)
    for n in (41, 42, 43):
        (tmp_path / f"workbench-{n}").touch()
    settings = cluster(node_network="netns")
    nodes = nodes_behind(settings, "cassandra")
    assert [(n.node_name, n.node_host, n.namespace) for n in nodes] == [
        ("cassandra", "10.77.1.41", "workbench-41"), ("cassandra-2", "10.77.1.42", "workbench-42"),
        ("cassandra-3", "10.77.1.43", "workbench-43")]


def test_a_node_s_links_to_the_clients_are_its_proxies_of_every_path_it_serves():
    toxi = Toxiproxy(cluster())
    assert toxi.node_proxies(1) == ["cassandra-2", "s3-2", "ignite-2"]
    assert toxi.node_proxies(2) == ["cassandra-3"]
    assert toxi.node_proxies(0) == ["cassandra", "s3", "ignite", "triton_http", "triton_grpc"]


def test_node_faults_are_drawn_only_where_a_node_can_be_struck():
    assert applicable_faults(list(FAULTS), "ignite", ["ignite-2"]) == [
        "reset_peer", "timeout", "latency", "bandwidth", "node_kill", "partition"]  # never a restart of Ignite
    assert applicable_faults(list(FAULTS), "cassandra", []) == [
        "reset_peer", "timeout", "latency", "bandwidth", "restart"]  # one node: the old catalogue, same draws
    with pytest.raises(WorkbenchError, match=r"applies to loader cassandra; node faults need a cluster .*--nodes 3"):
        applicable_faults(["node_kill", "partition"], "cassandra", [])


def test_a_soak_of_node_faults_on_one_node_is_refused_before_anything_is_touched():
    settings = Settings(_env_file=None, toxiproxy_port=1)  # nothing listens there: refused before any request
    with pytest.raises(WorkbenchError, match="node faults need a cluster"):
        run_chaos(settings, ["s3-objects"], "d", 1.0, 0, faults=["partition"])
    with pytest.raises(WorkbenchError, match="node window -1 s"):
        run_chaos(cluster(), ["cassandra"], "d", 1.0, 0, faults=["node_kill"], node_window_s=-1)


def test_fault_names_accept_the_issue_s_spelling():
    assert fault_names("node-kill, partition,,latency") == ["node_kill", "partition", "latency"]


def test_the_report_names_each_node_fault_its_node_window_and_recovery():
    record = FaultRecord("cassandra", 3, "node_kill", "cassandra-2", 17, how="kill -9 of pid 4242",
                         window_s=5.04, recovery_s=31.2, survived=True, epoch_s=40.0)
    assert epoch_line(record) == ("epoch 3 cassandra: node_kill on cassandra-2 (kill -9 of pid 4242; away 5.0 s, "
                                  "healthy 31.2 s after it came back) after 17 samples, 40.0 s: survived")
    report = ChaosReport(["cassandra"], "d", 0, epochs=1, faults_injected=1, faults_survived=1, faults=[record])
    assert "  node_kill  epoch 3 cassandra-2: away 5.0 s, recovered in 31.2 s (kill -9 of pid 4242)" in \
        format_report(report)
    plain = FaultRecord("cassandra", 0, "latency", "cassandra", 5, survived=True, epoch_s=2.0)
    assert epoch_line(plain) == "epoch 0 cassandra: latency on cassandra after 5 samples, 2.0 s: survived"
