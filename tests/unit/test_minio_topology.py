"""MinIO's launch per topology (single drive, one process with several drives, distributed) and the cluster
health verdict; no server is started."""

from __future__ import annotations

import pytest

from workbench.config import Settings
from workbench.stack.minio import ClusterHealth, MinIO


def settings(tmp_path, nodes: int = 1, drives: int = 1) -> Settings:
    return Settings(host="127.0.0.31", state_dir=tmp_path, s3_nodes=nodes, s3_drives_per_node=drives,
                    s3_port=29300, s3_console_port=29301, s3_access_key="wb-unit", s3_secret_key="unit-secret",
                    tls=False)


def drive_args(command: list[str]) -> list[str]:
    return command[2:command.index("--quiet")]


def test_one_node_one_drive_keeps_the_single_drive_layout(tmp_path):
    launch = MinIO(settings(tmp_path)).launch()
    assert drive_args(launch.command) == [str(tmp_path / "minio" / "data")]
    assert "MINIO_CI_CD" not in launch.env and "_MINIO_SERVER_LOCAL" not in launch.env
    assert launch.command[launch.command.index("--address") + 1] == "127.0.0.31:29300"


def test_one_node_several_drives_is_one_erasure_set_on_the_root_disk(tmp_path):
    launch = MinIO(settings(tmp_path, drives=4)).launch()
    assert drive_args(launch.command) == [str(tmp_path / "minio" / "drives-1x4" / str(i)) for i in range(1, 5)]
    assert launch.env["MINIO_CI_CD"] == "1" and "_MINIO_SERVER_LOCAL" not in launch.env
    assert all((tmp_path / "minio" / "drives-1x4" / str(i)).is_dir() for i in range(1, 5))


@pytest.mark.parametrize("nodes,drives", [(4, 1), (2, 2)])
def test_every_node_starts_with_the_same_ordered_drives_and_names_its_own(tmp_path, nodes, drives):
    config = settings(tmp_path, nodes, drives)
    assert MinIO.node_count(config) == nodes
    launches = [MinIO(config, k).launch() for k in range(nodes)]
    lists = [drive_args(launch.command) for launch in launches]
    assert all(args == lists[0] for args in lists) and len(lists[0]) == nodes * drives
    expected = [f"http://127.0.0.{31 + k}:29300{tmp_path}/{'minio' if k == 0 else f'minio-{k + 1}'}"
                f"/drives-{nodes}x{drives}/{i}" for k in range(nodes) for i in range(1, drives + 1)]
    assert lists[0] == expected
    for k, launch in enumerate(launches):
        own = f"127.0.0.{31 + k}:29300"
        assert launch.command[launch.command.index("--address") + 1] == own
        assert launch.command[launch.command.index("--console-address") + 1] == f"127.0.0.{31 + k}:29301"
        assert launch.env["_MINIO_SERVER_LOCAL"] == own and launch.env["MINIO_CI_CD"] == "1"
        assert "unit-secret" not in " ".join(launch.command)  # the login travels in the environment only


def test_node_zero_is_the_endpoint_clients_use(tmp_path):
    config = settings(tmp_path, 4)
    assert MinIO(config, 0).url() == config.s3_endpoint()
    assert MinIO(config, 3).url() == "http://127.0.0.34:29300"


def test_the_cluster_verdict_names_missing_nodes():
    nodes = {"minio": True, "minio-2": True, "minio-3": False}
    degraded = ClusterHealth(nodes, 2, 2, writable=True, readable=True)
    assert degraded.state == "degraded" and "minio-3 missing" in degraded.summary
    assert ClusterHealth(dict.fromkeys(nodes, True), 2, 2, writable=True, readable=True).state == "healthy"
    assert ClusterHealth(nodes, 2, 2, writable=False, readable=True).state == "degraded"
    assert ClusterHealth(nodes, 2, 2, writable=False, readable=False).state == "down"
    assert ClusterHealth(dict.fromkeys(nodes, False), 0, 0, writable=False, readable=False).state == "down"
