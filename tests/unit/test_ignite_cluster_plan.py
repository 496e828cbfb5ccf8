"""An Ignite cluster's node configuration, its clients' addresses and the refusal of impossible backups (no server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from workbench.clients.ignite import settings_endpoint
from workbench.config import Settings
from workbench.stack.ignite import BOOTSTRAP_PENDING, Ignite, ignite_xml
from workbench.stack.manager import select

ROOT = Path(__file__).resolve().parents[2]


def cluster(tmp_path: Path, **more) -> Settings:
    return Settings(host="127.0.0.21", state_dir=tmp_path, ignite_nodes=3, ignite_backups=1,
                    ignite_username="workbench", ignite_password=SecretStr("not-a-real-one"), **more)


def test_each_node_binds_its_own_address_and_discovers_only_the_cluster(tmp_path):
    xml = ignite_xml(cluster(tmp_path), tmp_path, Ignite.health_cache, authentication=True, node=1, nodes=3)
    assert '<property name="consistentId" value="ignite-2"/>' in xml
    assert '<property name="localHost" value="127.0.0.22"/>' in xml
    assert xml.count('<property name="localAddress" value="127.0.0.22"/>') == 2  # discovery and communication
    assert xml.count('<property name="localPortRange" value="0"/>') == 2
    members = "".join(f"<value>127.0.0.{k}:{cluster(tmp_path).ignite_discovery_port}</value>" for k in (21, 22, 23))
    assert f"<list>{members}</list>" in xml
    assert "127.0.0.1" not in xml


def test_persistence_makes_the_default_region_persistent_with_a_wal_for_data(tmp_path):
    plain = ignite_xml(cluster(tmp_path), tmp_path, Ignite.health_cache, authentication=True)
    kept = ignite_xml(cluster(tmp_path, ignite_persistence=True), tmp_path, Ignite.health_cache, authentication=True)
    region = '<property name="name" value="default"/>'
    assert plain.split(region)[1].split("</bean>")[0].count('persistenceEnabled" value="false"') == 1
    assert kept.split(region)[1].split("</bean>")[0].count('persistenceEnabled" value="true"') == 1
    assert "#{64 * 1024 * 1024}" in kept and "#{4 * 1024 * 1024}" in plain


def test_one_stack_entry_per_node_each_with_its_own_folder(tmp_path):
    nodes = select(cluster(tmp_path), ["ignite"])
    assert [n.node_name for n in nodes] == ["ignite", "ignite-2", "ignite-3"]
    assert [n.address() for n in nodes] == [f"127.0.0.{k}:10800" for k in (21, 22, 23)]
    assert len({n.data_dir for n in nodes}) == 3


@pytest.mark.parametrize("persistence", [False, True])
def test_only_persistence_keeps_the_work_folder_and_only_node_0_bootstraps_a_fresh_one(tmp_path, monkeypatch,
                                                                                        persistence):
    monkeypatch.setattr("workbench.stack.java.require_tool", lambda name: name)  # no JVM needed to write the files
    settings = cluster(tmp_path, ignite_persistence=persistence)
    first, second = Ignite(settings, 0), Ignite(settings, 1)
    for node in (first, second):
        (node.data_dir / "work").mkdir(parents=True)
        (node.data_dir / "work" / "page.bin").write_bytes(b"x")
        node.launch()
        assert (node.data_dir / "work" / "page.bin").exists() == persistence
        assert (node.data_dir / "ignite.xml").stat().st_mode & 0o777 == 0o600
    # node 0 bootstraps the login of a fresh cluster only: a kept persistent store already holds the users
    assert (first.data_dir / BOOTSTRAP_PENDING).exists() == (not persistence)
    assert not (second.data_dir / BOOTSTRAP_PENDING).exists()


def test_clients_know_every_node_directly_or_each_through_its_own_proxy(tmp_path):
    settings = cluster(tmp_path)
    direct = settings_endpoint(settings)
    assert (direct.host, direct.port) == ("127.0.0.21", 10800)
    assert direct.others == (("127.0.0.22", 10800), ("127.0.0.23", 10800))
    assert direct.where == "127.0.0.21:10800, 127.0.0.22:10800, 127.0.0.23:10800"
    proxied = settings_endpoint(settings, via_proxy=True)
    assert [(proxied.host, proxied.port), *proxied.others] == [(f"127.0.0.{k}", 20800) for k in (21, 22, 23)]
    assert settings.proxy_names("ignite") == ["ignite", "ignite-2", "ignite-3"]
    assert settings_endpoint(settings, host="10.0.0.9").others == ()  # a named server is that server only


def test_backups_the_nodes_cannot_hold_are_refused_in_one_line_before_anything_starts(tmp_path):
    env = {**os.environ, "WORKBENCH_IGNITE_NODES": "2", "WORKBENCH_IGNITE_BACKUPS": "2",
           "WORKBENCH_STATE_DIR": str(tmp_path / "state"), "WORKBENCH_HOST": "127.0.0.21"}
    done = subprocess.run([sys.executable, "-m", "workbench.cli", "stack", "status", "ignite"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    message = " ".join(done.stdout.split())  # rich wraps long lines
    assert "WORKBENCH_IGNITE_BACKUPS=2 needs at least 3 nodes" in message and "WORKBENCH_IGNITE_NODES is 2" in message
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "state").exists()


def test_a_fresh_node_0_with_a_login_lets_peers_join_only_once_its_default_login_gets_in(tmp_path):
    """Nothing listens on 127.0.0.21 here: a fresh node 0 with authentication is not joinable yet; without the
    bootstrap marker (a kept store, a retired default login) or without a login, peers never wait."""
    node = Ignite(cluster(tmp_path), 0)
    node.data_dir.mkdir(parents=True)
    assert node.joinable()  # no marker: not a fresh bootstrap
    (node.data_dir / BOOTSTRAP_PENDING).touch()
    assert not node.joinable()
    anonymous = cluster(tmp_path).model_copy(update={"ignite_username": None, "ignite_password": None})
    assert Ignite(anonymous, 0).joinable()
