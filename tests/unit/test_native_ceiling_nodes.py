"""The native ceilings in a cluster: every node goes on the program's command line, as the loaders reach them.

Through the proxies (`via_proxy`) node k is its proxy on its loopback address; directly it is the node's own
address (in a namespace with node_network=netns); an external cluster's endpoint lists win over both.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

import workbench.bench.native_ceilings as native
from workbench import config
from workbench.bench.native_ceilings import CeilingConfig, command_for
from workbench.config import Settings


@pytest.fixture(autouse=True)
def no_build(tmp_path, monkeypatch):
    """Command lines without building or fetching anything; a catalog entry for every backend."""
    monkeypatch.setattr(native, "go_program", lambda settings, name: tmp_path / name)
    monkeypatch.setattr(native, "java_classpath", lambda settings: [tmp_path / "classes"])
    entries = {"cassandra": {"tables": {"train": "ks.data_train"}, "metadata_tables": {"train": "ks.metadata_train"}},
               "ignite": {"cache": "D"}, "s3-objects": {"bucket": "b", "prefix": "d"}}
    monkeypatch.setattr(native, "locate", lambda settings, backend, dataset: entries[backend])


def cluster(tmp_path: Path, **values) -> Settings:
    return Settings(_env_file=None, host="127.0.0.51", state_dir=tmp_path, cassandra_nodes=3,
                    cassandra_replication_factor=3, s3_nodes=2, ignite_nodes=2, ignite_backups=1,
                    s3_access_key=SecretStr("a" * 20), s3_secret_key=SecretStr("s" * 40), **values)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_through_the_proxies_every_node_s_proxy_is_given(tmp_path):
    settings = cluster(tmp_path)
    proxied = CeilingConfig(dataset="d", via_proxy=True)
    cql = command_for(settings, "cassandra", proxied).argv
    assert (flag(cql, "-host"), flag(cql, "-port")) == ("127.0.0.51,127.0.0.52,127.0.0.53", "19042")
    assert flag(command_for(settings, "s3-objects", proxied).argv, "-endpoint") == "127.0.0.51:19000,127.0.0.52:19000"
    assert flag(command_for(settings, "ignite", proxied).argv, "--addresses") == "127.0.0.51:20800,127.0.0.52:20800"


def test_directly_in_namespaces_the_nodes_own_addresses_are_given(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "NETNS_DIR", tmp_path)
    for n in (51, 52, 53):
        (tmp_path / f"workbench-{n}").touch()
    settings = cluster(tmp_path, node_network="netns")
    direct = CeilingConfig(dataset="d")
    cql = command_for(settings, "cassandra", direct).argv
    assert (flag(cql, "-host"), flag(cql, "-port")) == ("10.77.1.51,10.77.1.52,10.77.1.53", "9042")
    assert flag(command_for(settings, "s3-objects", direct).argv, "-endpoint") == "10.77.1.51:9000,10.77.1.52:9000"
    assert flag(command_for(settings, "ignite", direct).argv, "--addresses") == "10.77.1.51:10800,10.77.1.52:10800"


def test_an_external_cluster_s_lists_win(tmp_path):
    settings = Settings(_env_file=None, stack="external", state_dir=tmp_path,
                        cassandra_contact_points=["db1:9142", "db2:9142"], ignite_addresses=["ig1", "[::1]:10900"],
                        s3_endpoints=["https://s3a.example:9000", "https://s3b.example:9000"],
                        s3_access_key=SecretStr("a" * 20), s3_secret_key=SecretStr("s" * 40))
    proxied = CeilingConfig(dataset="d", via_proxy=True)  # no toxiproxy in front of an external cluster
    cql = command_for(settings, "cassandra", proxied).argv
    assert (flag(cql, "-host"), flag(cql, "-port")) == ("db1,db2", "9142")
    assert flag(command_for(settings, "s3-objects", proxied).argv, "-endpoint") == "s3a.example:9000,s3b.example:9000"
    assert flag(command_for(settings, "ignite", proxied).argv, "--addresses") == "ig1:10800,[::1]:10900"


def test_one_node_gives_one_address_as_before(tmp_path):
    settings = Settings(_env_file=None, state_dir=tmp_path, s3_access_key=SecretStr("a" * 20),
                        s3_secret_key=SecretStr("s" * 40))
    cql = command_for(settings, "cassandra", CeilingConfig(dataset="d")).argv
    assert (flag(cql, "-host"), flag(cql, "-port")) == ("127.0.0.1", "9042")
    assert flag(command_for(settings, "s3-objects", CeilingConfig(dataset="d")).argv, "-endpoint") == "127.0.0.1:9000"
