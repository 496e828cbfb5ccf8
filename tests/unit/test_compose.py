"""docker-compose.yml is checked structurally (no Docker engine runs here) against the local stack's settings."""

import json
from pathlib import Path

import pytest
import yaml

from workbench.config import PROXIED, Settings
from workbench.stack.registry import SERVICES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SETTINGS = Settings(_env_file=None)


def published(service: str) -> dict[int, int]:
    """container port -> host port, asserting every port binds to 127.0.0.1."""
    ports = {}
    for spec in COMPOSE["services"][service]["ports"]:
        host_ip, host_port, container_port = spec.split(":")
        assert host_ip == "127.0.0.1", f"{service} publishes {spec} beyond loopback"
        ports[int(container_port)] = int(host_port)
    return ports


def test_same_services_as_local_stack():
    assert set(COMPOSE["services"]) == set(SERVICES)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_has_healthcheck(service):
    check = COMPOSE["services"][service]["healthcheck"]
    assert check["test"] and check["retries"] > 0


def test_ports_match_settings():
    assert published("cassandra") == {9042: SETTINGS.cassandra_port}
    assert published("minio") == {9000: SETTINGS.s3_port, 9001: SETTINGS.s3_console_port}
    assert published("ignite") == {10800: SETTINGS.ignite_port}
    assert published("triton") == {
        8000: SETTINGS.triton_http_port, 8001: SETTINGS.triton_grpc_port, 8002: SETTINGS.triton_metrics_port,
    }
    proxy_ports = {SETTINGS.port(name, via_proxy=True) for name in PROXIED}
    assert set(published("toxiproxy").values()) == proxy_ports | {SETTINGS.toxiproxy_port}


def test_toxiproxy_config_matches_proxied_paths():
    proxies = {p["name"]: p for p in json.loads((ROOT / "docker" / "toxiproxy.json").read_text())}
    assert set(proxies) == set(PROXIED)
    upstream_service = {"cassandra": "cassandra", "s3": "minio", "ignite": "ignite",
                        "triton_http": "triton", "triton_grpc": "triton"}
    for name, proxy in proxies.items():
        assert int(proxy["listen"].rsplit(":", 1)[1]) == SETTINGS.port(name, via_proxy=True)
        host, port = proxy["upstream"].split(":")
        assert host == upstream_service[name]
        assert int(port) in published(host), f"{name} forwards to a port {host} does not serve"


def test_credentials_come_from_env_file():
    env = COMPOSE["services"]["minio"]["environment"]
    assert env["MINIO_ROOT_USER"].startswith("${WORKBENCH_S3_ACCESS_KEY:?")
    assert env["MINIO_ROOT_PASSWORD"].startswith("${WORKBENCH_S3_SECRET_KEY:?")
    assert "WORKBENCH_S3_ACCESS_KEY" in Settings.model_config["env_prefix"] + "S3_ACCESS_KEY"


def test_named_volumes_declared():
    declared = set(COMPOSE["volumes"])
    used = {v.split(":")[0] for s in COMPOSE["services"].values() for v in s.get("volumes", [])
            if not v.startswith(".")}
    assert used and used <= declared


def test_triton_image_has_what_the_models_import():
    triton = COMPOSE["services"]["triton"]
    dockerfile = (ROOT / triton["build"]["dockerfile"]).read_text()
    assert "tritonserver:24.10" in dockerfile  # Triton 2.51, as in the local stack
    for package in ("nvidia-dali", "torch", "cassandra-driver"):
        assert package in dockerfile
    assert triton["environment"]["WORKBENCH_HOST"] == "cassandra"


def test_triton_reserves_gpu():
    devices = COMPOSE["services"]["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
