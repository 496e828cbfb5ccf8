"""Topology settings: node counts, replication checked before anything starts, one node per stack entry."""

from __future__ import annotations

import pytest

from workbench.config import Settings, cluster_topology, get_settings, write_settings
from workbench.errors import WorkbenchError
from workbench.stack.manager import select


def test_replication_factor_larger_than_the_ring_is_one_line_naming_both_settings(monkeypatch):
    monkeypatch.setenv("WORKBENCH_CASSANDRA_REPLICATION_FACTOR", "3")
    get_settings.cache_clear()
    with pytest.raises(WorkbenchError) as error:
        get_settings()
    get_settings.cache_clear()
    message = str(error.value)
    assert "\n" not in message
    assert "WORKBENCH_CASSANDRA_REPLICATION_FACTOR=3" in message and "WORKBENCH_CASSANDRA_NODES=1" in message


def test_ignite_backups_need_more_nodes_than_backups():
    with pytest.raises(ValueError, match="needs at least 2 nodes"):
        Settings(ignite_backups=1)
    assert Settings(ignite_nodes=2, ignite_backups=1).ignite_backups == 1


def test_external_clusters_are_not_checked_against_local_node_counts():
    assert Settings(stack="external", cassandra_replication_factor=3).cassandra_replication_factor == 3


def test_node_k_listens_on_the_next_loopback_address():
    settings = Settings(host="127.0.0.11", cassandra_nodes=3, cassandra_replication_factor=3)
    assert [settings.node_host(k) for k in range(3)] == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    with pytest.raises(WorkbenchError, match="not a loopback address"):
        Settings(host="10.0.0.5").node_host(1)


def test_one_proxy_per_node_of_a_clustered_path():
    settings = Settings(cassandra_nodes=3, cassandra_replication_factor=3, s3_nodes=2)
    assert settings.proxy_names("cassandra") == ["cassandra", "cassandra-2", "cassandra-3"]
    assert settings.proxy_names("s3") == ["s3", "s3-2"]
    assert settings.proxy_names("triton_http") == ["triton_http"]


def test_every_result_row_can_record_the_topology():
    topology = Settings(**cluster_topology(3)).topology()
    assert topology["cassandra_nodes"] == 3 and topology["cassandra_replication_factor"] == 3
    assert topology["ignite_backups"] == 1 and topology["s3_nodes"] == 3


def test_stack_up_nodes_is_kept_in_the_env_file(tmp_path, monkeypatch):
    env = tmp_path / ".env"
    env.write_text("WORKBENCH_S3_BUCKET=kept\nWORKBENCH_CASSANDRA_NODES=1\n")
    write_settings(cluster_topology(3), env)
    lines = env.read_text().splitlines()
    assert "WORKBENCH_S3_BUCKET=kept" in lines and lines.count("WORKBENCH_CASSANDRA_NODES=3") == 1
    assert "WORKBENCH_CASSANDRA_NODES=1" not in lines
    assert env.stat().st_mode & 0o777 == 0o600
    assert Settings(_env_file=env).cassandra_replication_factor == 3


def test_select_names_a_whole_service_or_one_node():
    settings = Settings(s3_nodes=3)
    nodes = select(settings, ["minio"])
    assert [s.node_name for s in nodes] == ["minio", "minio-2", "minio-3"]
    assert [s.address().split(":")[0] for s in nodes] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    assert len({s.data_dir for s in nodes}) == 3 and len({s.home for s in nodes}) == 1
    assert [s.node_name for s in select(settings, ["minio-2"])] == ["minio-2"]
    with pytest.raises(WorkbenchError, match="unknown service"):
        select(settings, ["minio-4"])
